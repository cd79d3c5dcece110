package evalsid

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// Bounds of what pools hand on with EnqueueTrial: a run's trials, and a trial's name.
const (
	// MaxTrialsPerRun is the most trials of one run that wait in a class's queue: a pool, or any
	// pod of its namespace, cannot grow a shared class's queue, and so its pool, without bound.
	MaxTrialsPerRun = 10_000
	// maxTrialName is the longest trial name kept.
	maxTrialName = 256
)

// EnqueueTrial hands one trial of a run to a SandboxClass's shared queue. The run must be one the
// caller may read (a pool's own namespace's) and not have ended, the class the run's own when it
// names one, and the class must admit the run's namespace: a pool whose Evaluator names a class
// its namespace may not use, or a pod that claims any class it likes, gets PermissionDenied, and
// nothing waits. A trial is queued once, whatever number of times it is handed on, and a run
// queues at most MaxTrialsPerRun.
func (qs queueService) EnqueueTrial(ctx context.Context, req *connect.Request[v1.EnqueueTrialRequest]) (*connect.Response[v1.EnqueueTrialResponse], error) {
	m, s := req.Msg, qs.s
	switch {
	case m.Project == "" || m.RunId == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("project and run_id are required"))
	case m.Trial == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("trial: required: the trial's name within the run"))
	case len(m.Trial) > maxTrialName:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("trial: %d bytes, at most %d", len(m.Trial), maxTrialName))
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
	if phase := s.current(r, time.Now()).Phase; terminal(phase) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("run %s has ended (%s): its trials are not queued", m.RunId, phase))
	}
	if !r.trials[m.Trial] {
		if len(r.trials) >= s.maxTrials {
			return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("run %s has handed on %d trials, the most one run may", m.RunId, s.maxTrials))
		}
		if r.trials == nil {
			r.trials = map[string]bool{}
		}
		r.trials[m.Trial] = true
		s.queues[key]++
	}
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
