package evalsid

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	v1 "evals.si/operator/apiclient/evalsiv1"
)

// policy is a stored policy; names are global and the project that made one owns it.
type policy struct{ msg *v1.Policy }

// traceSource is a stored trace source, scoped by project.
type traceSource struct{ msg *v1.TraceSource }

type monitorService struct{ s *Server }

func (ms monitorService) PutPolicy(ctx context.Context, req *connect.Request[v1.PutPolicyRequest]) (*connect.Response[v1.PutPolicyResponse], error) {
	m := req.Msg
	if err := validatePolicy(m); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.policies[m.Name]
	if ok && cur.msg.Project != m.Project {
		return nil, connect.NewError(connect.CodeAlreadyExists,
			fmt.Errorf("the policy name %q is taken by another project", m.Name))
	}
	rev, owner := int64(1), m.Owner
	if ok {
		var err error
		if owner, err = ownerAfterPut("policy", m.Project, m.Name, cur.msg.Owner, m.Owner); err != nil {
			return nil, err
		}
		rev = cur.msg.Revision + 1
	} else if err := s.addMonitorObject(m.Project); err != nil {
		return nil, err
	}
	p := &v1.Policy{Name: m.Name, Project: m.Project, Spec: proto.Clone(m.Spec).(*v1.PolicySpec), Creator: callerOf(ctx).creator(m.Creator), Revision: rev, Owner: owner}
	s.policies[m.Name] = &policy{msg: p}
	return connect.NewResponse(&v1.PutPolicyResponse{Policy: proto.Clone(p).(*v1.Policy)}), nil
}

func validatePolicy(m *v1.PutPolicyRequest) error {
	switch {
	case m.Project == "":
		return errors.New("project: required")
	case m.Name == "":
		return errors.New("name: required")
	case m.Spec == nil:
		return errors.New("spec: required")
	case m.Spec.TraceSource == "":
		return errors.New("spec.traceSource: required")
	case m.Spec.SamplingRate < 0 || m.Spec.SamplingRate > 1:
		return fmt.Errorf("spec.samplingRate: %v is not between 0 and 1", m.Spec.SamplingRate)
	}
	return nil
}

// ownedPolicy returns the policy name that project owns; NotFound for any other project, which
// learns nothing of names it does not own. The caller holds s.mu.
func (s *Server) ownedPolicy(project, name string) (*policy, error) {
	p, ok := s.policies[name]
	if !ok || p.msg.Project != project {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("project %s has no policy %q", project, name))
	}
	return p, nil
}

func (ms monitorService) GetPolicy(_ context.Context, req *connect.Request[v1.GetPolicyRequest]) (*connect.Response[v1.GetPolicyResponse], error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.ownedPolicy(req.Msg.Project, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.GetPolicyResponse{Policy: proto.Clone(p.msg).(*v1.Policy)}), nil
}

func (ms monitorService) DeletePolicy(_ context.Context, req *connect.Request[v1.DeletePolicyRequest]) (*connect.Response[v1.DeletePolicyResponse], error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.ownedPolicy(req.Msg.Project, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	if !mayWrite(p.msg.Owner, req.Msg.Owner) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("project %s has no policy %q of owner %s", req.Msg.Project, req.Msg.Name, req.Msg.Owner))
	}
	delete(s.policies, req.Msg.Name)
	s.monitorOf[req.Msg.Project]--
	return connect.NewResponse(&v1.DeletePolicyResponse{}), nil
}

// SetPolicySpec changes a stored policy behind the operator's back (as the CLI would).
func (s *Server) SetPolicySpec(name string, spec *v1.PolicySpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.policies[name]; ok {
		p.msg.Spec = proto.Clone(spec).(*v1.PolicySpec)
		p.msg.Revision++
	}
}

// Policy returns a stored policy by its global name, or nil.
func (s *Server) Policy(name string) *v1.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.policies[name]; ok {
		return proto.Clone(p.msg).(*v1.Policy)
	}
	return nil
}

// TraceSource returns a stored trace source of project by its name, or nil.
func (s *Server) TraceSource(project, name string) *v1.TraceSource {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts, ok := s.sources[sourceKey(project, name)]; ok {
		return proto.Clone(ts.msg).(*v1.TraceSource)
	}
	return nil
}

// addMonitorObject counts a new policy or trace source of project, refusing it past
// MaxObjectsPerProject. The caller holds s.mu.
func (s *Server) addMonitorObject(project string) error {
	if s.monitorOf[project] >= MaxObjectsPerProject {
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("project %s has %d policies and trace sources, the most this server keeps", project, MaxObjectsPerProject))
	}
	s.monitorOf[project]++
	return nil
}

func sourceKey(project, name string) string { return project + "/" + name }

// mayWrite reports whether a write that names owner ("" for one by hand) may change or delete a
// policy or trace source that held holds ("" for none): what no one holds, what the same owner
// holds, or anything, by hand (monitor.proto, "An owner").
func mayWrite(held, owner string) bool { return held == "" || owner == "" || held == owner }

// ownerAfterPut returns the owner that a put by owner leaves on the policy or trace source (what)
// name of project that held holds, or AlreadyExists when owner may not write it.
func ownerAfterPut(what, project, name, held, owner string) (string, error) {
	if !mayWrite(held, owner) {
		return "", connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("the %s name %q is held in project %s by %s", what, name, project, held))
	}
	return cmp.Or(owner, held), nil
}

func (ms monitorService) PutTraceSource(ctx context.Context, req *connect.Request[v1.PutTraceSourceRequest]) (*connect.Response[v1.PutTraceSourceResponse], error) {
	m := req.Msg
	switch {
	case m.Project == "" || m.Name == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("project and name: required"))
	case m.Spec == nil || m.Spec.Type == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("spec.type: required"))
	}
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rev, owner := int64(1), m.Owner
	if cur, ok := s.sources[sourceKey(m.Project, m.Name)]; ok {
		var err error
		if owner, err = ownerAfterPut("trace source", m.Project, m.Name, cur.msg.Owner, m.Owner); err != nil {
			return nil, err
		}
		rev = cur.msg.Revision + 1
	} else if err := s.addMonitorObject(m.Project); err != nil {
		return nil, err
	}
	ts := &v1.TraceSource{Name: m.Name, Project: m.Project, Spec: proto.Clone(m.Spec).(*v1.TraceSourceSpec), Revision: rev, Owner: owner}
	if strings.EqualFold(m.Spec.Type, "otlp") {
		ts.IngestEndpoint = fmt.Sprintf("%s/ingest/%s/%s/v1/traces", s.baseURL, m.Project, m.Name)
	}
	s.sources[sourceKey(m.Project, m.Name)] = &traceSource{msg: ts}
	return connect.NewResponse(&v1.PutTraceSourceResponse{TraceSource: proto.Clone(ts).(*v1.TraceSource)}), nil
}

func (ms monitorService) GetTraceSource(_ context.Context, req *connect.Request[v1.GetTraceSourceRequest]) (*connect.Response[v1.GetTraceSourceResponse], error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ts, ok := s.sources[sourceKey(req.Msg.Project, req.Msg.Name)]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("project %s has no trace source %q", req.Msg.Project, req.Msg.Name))
	}
	return connect.NewResponse(&v1.GetTraceSourceResponse{TraceSource: proto.Clone(ts.msg).(*v1.TraceSource)}), nil
}

func (ms monitorService) DeleteTraceSource(_ context.Context, req *connect.Request[v1.DeleteTraceSourceRequest]) (*connect.Response[v1.DeleteTraceSourceResponse], error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	key := sourceKey(req.Msg.Project, req.Msg.Name)
	ts, ok := s.sources[key]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("project %s has no trace source %q", req.Msg.Project, req.Msg.Name))
	}
	if !mayWrite(ts.msg.Owner, req.Msg.Owner) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("project %s has no trace source %q of owner %s", req.Msg.Project, req.Msg.Name, req.Msg.Owner))
	}
	delete(s.sources, key)
	s.monitorOf[req.Msg.Project]--
	return connect.NewResponse(&v1.DeleteTraceSourceResponse{}), nil
}
