package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"evals.si/operator/evalsi"
	"evals.si/operator/shard"
)

// FieldManager is the one field manager of every write the operator makes.
const FieldManager = evalsi.FieldManager

// services are the parts of an engine that its controllers share with it, made once by New: the
// clients, the logger, the metrics and the Event recorder, what discovery saw, the running
// informers, the spec checks passed, the objects waiting on an API, and the Kubernetes
// version's verdict. Engine and Controller each embed them; a controller holds nothing else of
// its engine.
type services struct {
	// namespace, shard, workers, reconcileTimeout, discoveryInterval, clock, tenancy and
	// writable are the engine's Config's.
	namespace                           string
	shard                               shard.Shard
	workers                             int
	reconcileTimeout, discoveryInterval time.Duration
	clock                               clock.PassiveClock
	tenancy                             Tenancy
	writable                            <-chan struct{}
	client                              dynamic.Interface
	kube                                kubernetes.Interface
	// rest is a REST client for what the engine decodes itself: children (cached.ChildListWatch,
	// apply; protobuf where served) and owners and the answers to status writes (JSON).
	rest rest.Interface
	// recorder writes Events; Run sets it before any controller starts.
	recorder record.EventRecorder
	metrics  *Metrics
	log      *slog.Logger
	served   *servedSet
	// informers are the running informers, which discovery starts and stops.
	informers *informerSet
	// validated remembers the spec checks already passed (Kind.Validate), by object.
	validated *validations
	// waiters are the objects waiting for an external API to come back; apiWaiters those waiting
	// for the API server, which the engine's gate finds back.
	waiters, apiWaiters *waiters
	// refusal is why the engine does not reconcile on this server's Kubernetes version ("" when
	// it does).
	refusal *atomic.Value
}

// VersionRefusal says why the engine does not reconcile on this server, or "" when it does.
func (s *services) VersionRefusal() string {
	why, _ := s.refusal.Load().(string)
	return why
}

// Writable reports whether the engine may write: Config.Writable is nil or closed.
func (s *services) Writable() bool {
	select {
	case <-s.writable:
		return true
	default:
		return s.writable == nil
	}
}

// waitWritable waits until the engine may write, and reports false if ctx ended first.
func (s *services) waitWritable(ctx context.Context) bool {
	if s.writable == nil {
		return true
	}
	select {
	case <-s.writable:
		return true
	case <-ctx.Done():
		return false
	}
}

// project is the project obj acts in.
func (s *services) project(obj *unstructured.Unstructured) (string, error) {
	if s.tenancy == nil {
		return obj.GetNamespace(), nil
	}
	return s.tenancy.Project(obj)
}
