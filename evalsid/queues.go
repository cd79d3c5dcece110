package evalsid

import (
	"context"
	"errors"

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
