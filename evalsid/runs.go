package evalsid

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "evals.si/operator/apiclient/evalsiv1"
)

// run is a run and when it was created; its phase follows the schedule unless set explicitly.
type run struct {
	msg     *v1.Run
	created time.Time
	// fixed is a phase set by SetPhase or CancelRun, overriding the schedule.
	fixed v1.Phase
	// trials are the names of the trials handed to a SandboxClass's queue (EnqueueTrial).
	trials map[string]bool
}

// current returns the run as of now, moving it along the schedule.
func (s *Server) current(r *run, now time.Time) *v1.Run {
	phase := r.fixed
	if phase == v1.Phase_PHASE_UNSPECIFIED {
		phase = s.scheduledPhase(now.Sub(r.created))
	}
	if phase != r.msg.Phase {
		s.moveTo(r, phase, now)
	}
	return proto.Clone(r.msg).(*v1.Run)
}

func (s *Server) scheduledPhase(age time.Duration) v1.Phase {
	sch := s.schedule
	switch {
	case sch.Pending == 0 || age < sch.Pending:
		return v1.Phase_PHASE_PENDING
	case sch.Running == 0 || age < sch.Pending+sch.Running:
		return v1.Phase_PHASE_RUNNING
	case sch.Fail:
		return v1.Phase_PHASE_FAILED
	default:
		return v1.Phase_PHASE_SUCCEEDED
	}
}

// moveTo sets a run's phase with its times and, when it ends, its summary.
func (s *Server) moveTo(r *run, phase v1.Phase, now time.Time) {
	r.msg.Phase = phase
	if phase != v1.Phase_PHASE_PENDING && r.msg.StartedAt == nil {
		r.msg.StartedAt = timestamppb.New(now)
	}
	if terminal(phase) && r.msg.CompletedAt == nil {
		r.msg.CompletedAt = timestamppb.New(now)
		sum := s.schedule.Summary
		r.msg.Summary = &v1.Summary{Total: sum.Total, Passed: sum.Passed, Failed: sum.Failed, Errored: sum.Errored, Score: sum.Score}
		if phase == v1.Phase_PHASE_FAILED {
			r.msg.Message = "the run failed"
		}
	}
}

func terminal(p v1.Phase) bool {
	return p == v1.Phase_PHASE_SUCCEEDED || p == v1.Phase_PHASE_FAILED || p == v1.Phase_PHASE_CANCELLED
}

// SetPhase moves a run to phase (a test's control of the schedule).
func (s *Server) SetPhase(id string, phase v1.Phase) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runs[id]
	if !ok {
		return fmt.Errorf("no run %s", id)
	}
	r.fixed = phase
	s.moveTo(r, phase, time.Now())
	return nil
}

// KnownSuites restricts runs to the named suites; others are InvalidArgument. By default any
// suite is known.
func (s *Server) KnownSuites(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.suites = setOf(names)
}

// setOf is the set of names: empty, not nil, when there are none.
func setOf(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}

// Runs returns every run, as of now.
func (s *Server) Runs() []*v1.Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*v1.Run
	for _, r := range s.runs {
		out = append(out, s.current(r, time.Now()))
	}
	return out
}

type runService struct{ s *Server }

func (rs runService) CreateRun(ctx context.Context, req *connect.Request[v1.CreateRunRequest]) (*connect.Response[v1.CreateRunResponse], error) {
	m := req.Msg
	if err := validateRunSpec(m); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	s := rs.s
	key := m.Project + "/" + m.IdempotencyKey
	s.mu.Lock()
	if s.suites != nil && m.Spec.Suite != "" && !s.suites[m.Spec.Suite] {
		s.mu.Unlock()
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("spec.suite: unknown suite %q", m.Spec.Suite))
	}
	resp, replayed, err := s.replayRun(key, m)
	s.mu.Unlock()
	if replayed {
		return resp, err
	}
	// Outside the server's lock: a class the cache lacks is read from the API server, which must
	// not hold every other caller's call.
	c := callerOf(ctx)
	namespace := c.runNamespace(m.Namespace)
	if namespace == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("namespace: required: the namespace whose pools work the run"))
	}
	if err := s.mayUseClass(namespace, m.Spec.SandboxClass); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if resp, replayed, err := s.replayRun(key, m); replayed { // made by a call meanwhile
		return resp, err
	}
	now := time.Now()
	if s.runsOf[m.Project] >= MaxObjectsPerProject {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("project %s has %d runs, the most this server keeps", m.Project, MaxObjectsPerProject))
	}
	id := newRunID()
	r := &run{created: now, msg: &v1.Run{
		Id: id, Project: m.Project, Namespace: namespace, Spec: proto.Clone(m.Spec).(*v1.RunSpec), Phase: v1.Phase_PHASE_PENDING,
		Creator: c.creator(m.Creator), Url: fmt.Sprintf("%s/projects/%s/runs/%s", s.baseURL, m.Project, id),
		// This server runs no evaluator: every result it reports is made up, and it says so.
		Simulated: true,
	}}
	s.runs[id] = r
	s.runsOf[m.Project]++
	if m.IdempotencyKey != "" {
		s.byKey[key] = id
	}
	return connect.NewResponse(&v1.CreateRunResponse{Run: s.current(r, now)}), nil
}

// newRunID returns a run id no caller can guess: 128 random bits. Sequential ids would let
// anyone who may read or cancel some run name every other.
func newRunID() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand)
	return "run-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// replayRun answers a create whose idempotency key already made a run (key is project/key): that
// run, or FailedPrecondition for another spec. replayed is false when the key made none. The
// caller holds s.mu.
func (s *Server) replayRun(key string, m *v1.CreateRunRequest) (resp *connect.Response[v1.CreateRunResponse], replayed bool, err error) {
	id, ok := s.byKey[key]
	if !ok || m.IdempotencyKey == "" {
		return nil, false, nil
	}
	r := s.runs[id]
	if !proto.Equal(r.msg.Spec, m.Spec) {
		return nil, true, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("idempotency key %s was used for run %s with another spec", m.IdempotencyKey, id))
	}
	return connect.NewResponse(&v1.CreateRunResponse{Run: s.current(r, time.Now())}), true, nil
}

// validateRunSpec is the server's check of a run request.
func validateRunSpec(m *v1.CreateRunRequest) error {
	spec := m.Spec
	switch {
	case m.Project == "":
		return errors.New("project: required")
	case spec == nil:
		return errors.New("spec: required")
	case spec.Suite == "" && spec.Dataset == "":
		return errors.New("spec: one of suite and dataset is required")
	case spec.Target.GetEndpoint().GetUrl() == "":
		return errors.New("spec.target.endpoint.url: required")
	case hasUserInfo(spec.Target.GetEndpoint().GetUrl()):
		return errors.New("spec.target.endpoint.url: must not hold credentials; name the variable that holds the key in api_key_env")
	case spec.Trials < 0:
		return fmt.Errorf("spec.trials: %d is negative", spec.Trials)
	case spec.Concurrency < 0:
		return fmt.Errorf("spec.concurrency: %d is negative", spec.Concurrency)
	}
	return nil
}

// hasUserInfo reports whether raw is a URL with credentials in it.
func hasUserInfo(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.User != nil
}

func (rs runService) GetRun(ctx context.Context, req *connect.Request[v1.GetRunRequest]) (*connect.Response[v1.GetRunResponse], error) {
	s := rs.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.find(callerOf(ctx), req.Msg.Project, req.Msg.Id, req.Msg.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.GetRunResponse{Run: s.current(r, time.Now())}), nil
}

// maxBatch is the most ids BatchGetRuns takes in one call.
const maxBatch = 1000

func (rs runService) BatchGetRuns(ctx context.Context, req *connect.Request[v1.BatchGetRunsRequest]) (*connect.Response[v1.BatchGetRunsResponse], error) {
	m := req.Msg
	switch {
	case m.Project == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("project: required"))
	case len(m.Ids) > maxBatch:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ids: %d ids, at most %d per call", len(m.Ids), maxBatch))
	}
	s := rs.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now, c := time.Now(), callerOf(ctx)
	out := &v1.BatchGetRunsResponse{}
	for _, id := range m.Ids {
		r, err := s.find(c, m.Project, id, "")
		if err != nil {
			out.Missing = append(out.Missing, id)
			continue
		}
		out.Runs = append(out.Runs, s.current(r, now))
	}
	return connect.NewResponse(out), nil
}

func (rs runService) CancelRun(ctx context.Context, req *connect.Request[v1.CancelRunRequest]) (*connect.Response[v1.CancelRunResponse], error) {
	s := rs.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.find(callerOf(ctx), req.Msg.Project, req.Msg.Id, "")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if cur := s.current(r, now); !terminal(cur.Phase) {
		// The results so far stay with the run.
		r.fixed = v1.Phase_PHASE_CANCELLED
		s.moveTo(r, v1.Phase_PHASE_CANCELLED, now)
	}
	return connect.NewResponse(&v1.CancelRunResponse{Run: s.current(r, now)}), nil
}

// find returns a run of project by id or idempotency key, one that c may read: a pool reads only
// the runs of its own namespace, which are the runs it may work.
func (s *Server) find(c caller, project, id, key string) (*run, error) {
	if id == "" && key != "" {
		id = s.byKey[project+"/"+key]
	}
	r, ok := s.runs[id]
	if !ok || r.msg.Project != project || !c.mayRead(r.msg) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("project %s has no run %s", project, id+key))
	}
	return r, nil
}
