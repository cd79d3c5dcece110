package evalsid

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	v1 "evals.si/operator/apiclient/evalsiv1"
)

// queueKey names one pool's queue: an Evaluator's by its namespace, since a run's work waits only
// for the pools of the run's own namespace; a SandboxClass's shared pool with namespace "".
type queueKey struct {
	namespace, name string
	kind            v1.PoolKind
}

type queueService struct{ s *Server }

// GetQueueDepth answers the depth that SetQueueDepth last set (0 for a queue never set): the
// reference server runs no workers, so tests and `dev` say how much work waits.
func (qs queueService) GetQueueDepth(_ context.Context, req *connect.Request[v1.GetQueueDepthRequest]) (*connect.Response[v1.GetQueueDepthResponse], error) {
	m := req.Msg
	if m.Kind == v1.PoolKind_POOL_KIND_UNSPECIFIED || m.Name == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("kind and name are required"))
	}
	if m.Kind == v1.PoolKind_POOL_KIND_EVALUATOR && (m.Project == "" || m.Namespace == "") {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("an evaluator's queue needs its project and namespace"))
	}
	if m.Kind == v1.PoolKind_POOL_KIND_SANDBOX && m.Namespace != "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("namespace: a SandboxClass's queue is shared by every namespace; send none"))
	}
	qs.s.mu.Lock()
	depth := qs.s.queues[queueKey{namespace: m.Namespace, name: m.Name, kind: m.Kind}]
	qs.s.mu.Unlock()
	return connect.NewResponse(&v1.GetQueueDepthResponse{Depth: &depth}), nil
}

// SetQueueDepth sets how many items wait for the pool name of kind in namespace ("" for a
// SandboxClass's shared pool).
func (s *Server) SetQueueDepth(namespace string, kind v1.PoolKind, name string, depth uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queues[queueKey{namespace: namespace, name: name, kind: kind}] = depth
}

// EnqueueTrial hands one trial of a run to a SandboxClass's shared queue. The run must be one the
// caller may read (a pool's own namespace's), the class the run's own when it names one, and the
// class must admit the run's namespace: a pool whose Evaluator names a class its namespace may not
// use, or a pod that claims any class it likes, gets PermissionDenied, and nothing waits.
func (qs queueService) EnqueueTrial(ctx context.Context, req *connect.Request[v1.EnqueueTrialRequest]) (*connect.Response[v1.EnqueueTrialResponse], error) {
	m, s := req.Msg, qs.s
	if m.Project == "" || m.RunId == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("project and run_id are required"))
	}
	s.mu.Lock()
	r, err := s.find(callerOf(ctx), m.Project, m.RunId, "")
	var namespace, runClass string
	if err == nil {
		namespace, runClass = r.msg.Namespace, r.msg.Spec.GetSandboxClass()
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	class, err := trialClass(runClass, m.SandboxClass)
	if err != nil {
		return nil, err
	}
	// Outside the server's lock: a class the cache lacks is read from the API server.
	if err := s.mayUseClass(namespace, class); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := queueKey{name: class, kind: v1.PoolKind_POOL_KIND_SANDBOX}
	s.queues[key]++
	return connect.NewResponse(&v1.EnqueueTrialResponse{SandboxClass: class, Depth: s.queues[key]}), nil
}

// trialClass is the class a trial runs in: the run's when it names one, else the one asked for.
func trialClass(runClass, asked string) (string, error) {
	switch {
	case runClass != "" && asked != "" && asked != runClass:
		return "", connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("sandbox_class: the run's trials run in SandboxClass %s (its spec.sandboxClass), not %s", runClass, asked))
	case runClass != "":
		return runClass, nil
	case asked == "":
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("sandbox_class: required when the run names none"))
	}
	return asked, nil
}
