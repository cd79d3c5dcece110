package engine

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine/cached"
)

// Kind is one kind of object the engine runs a controller for: what it watches and owns, and the
// Reconciler that makes the world match each of its objects. Kinds register themselves with the
// engine (Config.Kinds); the engine knows none by name.
type Kind struct {
	// Controller is the name --controllers selects it by.
	Controller string
	// Name is the Kind, as children's owner references name it.
	Name       string
	Resource   schema.GroupVersionResource
	Namespaced bool
	// ChildResources are the resources of its children, watched by the managed-by label.
	ChildResources []schema.GroupVersionResource
	// ChildOrder orders the applies and deletions of its children by their kinds (nil: all at
	// once, the deletions by name).
	ChildOrder *ChildOrder
	// Handover names, by child kind, a field path its Reconciler may stop rendering once another
	// writer takes the field over (a Deployment's spec.replicas, once a ScaledObject scales it):
	// before the first apply without it, the field's value is handed to a manager of its own,
	// so that the field is kept rather than reset to its default by the apply that drops it.
	Handover map[string][]string
	// ChildNamespace, when set, is where all of its children live (a cluster-scoped kind's pools);
	// else the owner's namespace.
	ChildNamespace string
	// Finalizer is the finalizer the kind puts on its objects ("" for none); the engine releases
	// it for an object that may not act (its project) and when the operator is uninstalled.
	Finalizer string
	// Validate, when set, checks an object's spec before it is reconciled; a refusal is terminal
	// (InvalidSpec). The engine remembers the verdict of each object's generation.
	Validate func(*unstructured.Unstructured) error
	// Reconciler makes the world match one object.
	Reconciler Reconciler
	// Run, when set, runs beside the controller until ctx ends (a follower of external state
	// that sends no events).
	Run func(ctx context.Context, c *Controller)
	// Followed, when set, says which objects Run follows (Controller.Followed): asked once per
	// version of an object as it enters the cache, so that Run reads only those, not every
	// object each time (finished EvalRuns stay in the cache until they expire).
	Followed func(*unstructured.Unstructured) bool
	// Refers, when set, returns the objects of the engine's other kinds that obj waits on by name
	// (an EvalRun its SandboxClass and target CheckpointServer): when one of them is added,
	// changed or deleted, obj is reconciled at once rather than at its next look. Asked once per
	// version of obj as it enters the cache.
	Refers func(*unstructured.Unstructured) []Ref
	// Shared kinds are cached whole by the engine of every shard, because other kinds read their
	// objects (Controller.Lookup) and wait on them (Refers); each engine reconciles only those
	// of its shard. Other kinds' caches hold only their shard's objects.
	Shared bool
	// Off, when it returns a sentence, keeps the controller off (its configuration lacks what it
	// needs); the engine logs the sentence once.
	Off func() string
}

// ChildOrder orders a kind's children by their kinds: who must exist before whom.
type ChildOrder struct {
	// ApplyFirst go out in a wave before the other children: what those need to exist (the
	// ServiceAccount a Deployment's pods run as; a trial shape launchers' pods are held to).
	ApplyFirst []string
	// DeleteFirst go before the other children no longer desired (rights), DeleteLast after
	// them (what the others' deletion still needs gone before it).
	DeleteFirst, DeleteLast []string
}

// Ref names an object of one of the engine's kinds: the Kind, and the object's key in that kind's
// queue ("namespace/name", or "name" for a cluster-scoped kind).
type Ref struct{ Kind, Key string }

// String is the ref as the referrers index keeps it.
func (r Ref) String() string { return r.Kind + "/" + r.Key }

// Reconciler makes the world match one object and says what the object's status should be.
type Reconciler interface {
	Reconcile(ctx context.Context, r *Request) (Outcome, error)
}

// ReconcilerFunc is a Reconciler of one function.
type ReconcilerFunc func(ctx context.Context, r *Request) (Outcome, error)

// Reconcile calls f.
func (f ReconcilerFunc) Reconcile(ctx context.Context, r *Request) (Outcome, error) { return f(ctx, r) }

// Request is one object to reconcile, with what the engine gathered for every kind.
type Request struct {
	// Object is a copy of the object, the reconcile's own.
	Object *unstructured.Unstructured
	// Project is the project the object acts in ("" for a cluster-scoped kind), checked once per
	// reconcile before the kind's Reconciler runs.
	Project string
	// Refused is what the API server or the external API refused for the object's current
	// generation (TerminalError.Refused), "" when nothing: the kind does not try it again.
	Refused string
	// SpecChecked says the kind's Validate has passed the object's current generation, in this
	// reconcile or an earlier one; false when the kind has none or it was not asked (an object
	// being deleted, a generation already refused).
	SpecChecked bool
	// Controller is the object's controller: its kind and the engine's services.
	Controller *Controller
}

// asks is what the kind asks of each version of its objects as they enter the cache (Followed,
// Refers), nil when nothing.
func (k *Kind) asks() *cached.Asks {
	if k.Followed == nil && k.Refers == nil {
		return nil
	}
	a := &cached.Asks{Followed: k.Followed}
	if k.Refers != nil {
		a.Refers = func(u *unstructured.Unstructured) []string {
			var refs []string
			for _, r := range k.Refers(u) {
				refs = append(refs, r.String())
			}
			return refs
		}
	}
	return a
}

// NewKind returns the Kind of k, an API kind from the vocabulary's table, with its controller
// name, kind, resource and scope; the caller adds what it watches, owns and needs.
func NewKind(k evalsi.APIKind) *Kind {
	return &Kind{Controller: k.Controller, Name: k.Kind, Resource: k.Resource, Namespaced: k.Namespaced}
}

// Controller is the queue and workers of one kind, and what its Reconciler may use of the engine.
type Controller struct {
	// services are what it shares with its engine: it holds nothing else of it.
	services
	kind  *Kind
	queue workqueue.TypedRateLimitingInterface[string]
	// queueGauges are the queue's; they leave the series when run has shut the queue down.
	queueGauges *queueGauge
	// notReady are its objects not Ready, for the metrics; they leave with the queue's gauges.
	notReady *notReadyObjects
	inf      *informer
	// held are the objects whose reconcile a warm engine could not finish without a write: they
	// go back on the queue once the engine may write (hold, release).
	held heldKeys
}

// heldKeys are the keys of a warm engine's objects that wait for it to write.
type heldKeys struct {
	mu       sync.Mutex
	keys     map[string]struct{}
	released bool
}

// newController returns the controller of kind k, with the services of its engine.
func newController(s services, k *Kind) *Controller {
	m := s.metrics.queues.forQueue(k.Controller, s.shard.String(), s.Writable)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: k.Controller, MetricsProvider: m},
	)
	return &Controller{services: s, kind: k, queue: q, queueGauges: m, notReady: s.metrics.notReady.forController(k.Controller, s.shard.String(), s.Writable)}
}
