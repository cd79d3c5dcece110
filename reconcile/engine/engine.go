// Package engine is the operator's kind-neutral engine: discovery, informers and the
// caches tuned to what it reads, a rate-limited queue and workers per kind, server-side apply of
// children, one status writer, one finalizer lifecycle for objects kept in an external API, and
// the metrics of all of it. It names no evals.si kind: kinds register themselves (Kind) with what
// they watch, own and need, and are reconciled through their Reconciler. reconcile/doc.go walks
// the flow.
//
// What its informers keep of each object, and the codecs that read objects off the wire into it,
// are the leaf package cached, which knows nothing of the engine. The files here are one concept
// each, most of them methods of the two types every reconcile passes through, Engine (this file)
// and Controller (controller.go). The uses that run from a file back up to one that stands above
// it are of those two types and of what they hold: a method's receiver or a callback's parameter
// (kind.go's Run and referrers.go take a Controller; referrers.go, informers.go and discovery.go
// add methods to Engine, and call its startController and controllerOfKind), the Engine a
// Controller belongs to, and the Controller's methods grouped by concept elsewhere (setFinalizer
// in lifecycle.go, refused in status.go). kind.go's field Children shares its name with the type
// in children.go and uses nothing of it.
package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine/cached"
	"evals.si/operator/shard"
)

// FieldManager is the one field manager of every write the operator makes.
const FieldManager = evalsi.FieldManager

// restClientConfig is the configuration of the engine's REST client, over rc: it sends JSON and
// decodes errors in either media type, since built-in children are read as protobuf
// (cached/childproto.go) and the Status of a refused request comes in the media type its request
// accepted.
func restClientConfig(rc *rest.Config) *rest.Config {
	c := dynamic.ConfigFor(rc)
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return c
}

// Engine runs the controllers of its kinds.
type Engine struct {
	// discovery answers which resources are served and the server's version (Config.Discovery).
	discovery *cached.Discovery
	// events writes the engine's Events (Config.Events).
	events *Events
	cfg    Config
	client dynamic.Interface
	kube   kubernetes.Interface
	// rest is a REST client for what the engine decodes itself: children (cached.ChildListWatch, apply;
	// protobuf where served) and owners and the answers to status writes (JSON).
	rest     rest.Interface
	recorder record.EventRecorder
	metrics  *Metrics
	log      *slog.Logger

	mu     sync.Mutex
	served map[schema.GroupVersionResource]bool
	// kinds are the resources of the kinds discovery saw, for applying and deleting children.
	kinds       map[schema.GroupVersionKind]schema.GroupVersionResource
	informers   map[informerKey]*informer
	controllers map[string]*Controller
	synced      bool

	// offLogged remembers why each controller was last said to be off, so that a reason is
	// written once; only Run's goroutine uses it.
	offLogged map[string]string
	// refusal is why the engine does not reconcile on this server's Kubernetes version ("" when
	// it does); lastVersionWhy is the version verdict last logged (Run's goroutine only).
	refusal        atomic.Value
	lastVersionWhy string
	// waiters are the objects waiting for an external API to come back; apiWaiters those waiting
	// for the API server, which gate finds back.
	waiters, apiWaiters waiters
	gate                *cached.APIGate
	// validated remembers the spec checks already passed (Kind.Validate), by object.
	validated validations
}

// New returns an engine for cfg. It makes no request until Run.
func New(cfg Config) (*Engine, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Minute
	}
	if cfg.DiscoveryInterval <= 0 {
		cfg.DiscoveryInterval = 30 * time.Second
	}
	if cfg.ReconcileTimeout <= 0 {
		cfg.ReconcileTimeout = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Shard.Count == 0 {
		cfg.Shard = shard.Whole
	}
	if !cfg.Shard.IsWhole() {
		cfg.Log = cfg.Log.With("shard", cfg.Shard.String())
	}
	for _, name := range cfg.Controllers {
		if !slices.ContainsFunc(cfg.Kinds, func(k *Kind) bool { return k.Controller == name }) {
			return nil, fmt.Errorf("unknown controller %q (known: %v)", name, ControllerNames(cfg.Kinds))
		}
	}
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics()
	}
	rc := rest.CopyConfig(cfg.Rest)
	limitPerResource(rc)
	rc.Wrap(m.countRequests(cmp.Or(cfg.RequestLabel, cfg.Shard.String())))
	// Outside the count: a write the tenure stops is never sent.
	rc.Wrap(fenceWrites)
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("creating the HTTP client: %w", err)
	}
	client, err := dynamic.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	rcl, err := rest.UnversionedRESTClientForConfigAndClient(restClientConfig(rc), hc)
	if err != nil {
		return nil, fmt.Errorf("creating REST client: %w", err)
	}
	kube, err := kubernetes.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	d := cfg.Discovery
	if d == nil {
		d = cached.NewDiscovery(kube.Discovery(), cfg.DiscoveryInterval/2)
	}
	events := cfg.Events
	if events == nil {
		events = NewEvents(cfg.Namespace)
	}
	return &Engine{
		cfg: cfg, client: client, kube: kube, rest: rcl, metrics: m, log: cfg.Log, discovery: d, events: events,
		waiters:     waiters{away: IsAway, requeued: m.requeuedOnAnswer},
		apiWaiters:  waiters{away: cached.Unreachable, requeued: m.requeuedOnAPIServer},
		served:      map[schema.GroupVersionResource]bool{},
		kinds:       map[schema.GroupVersionKind]schema.GroupVersionResource{},
		informers:   map[informerKey]*informer{},
		controllers: map[string]*Controller{},
		offLogged:   map[string]string{},
	}, nil
}

// ControllerNames lists the controller names of kinds, in order.
func ControllerNames(kinds []*Kind) []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.Controller)
	}
	return out
}

// Kube returns the engine's typed client (for leader election and events).
func (e *Engine) Kube() kubernetes.Interface { return e.kube }

// Discovery returns what the engine asks the API server's discovery through, for the engines of
// this process's other shards to share (Config.Discovery).
func (e *Engine) Discovery() *cached.Discovery { return e.discovery }

// Events returns what the engine writes its Events through, for the engines of this process's
// other shards to share (Config.Events).
func (e *Engine) Events() *Events { return e.events }

// Metrics returns the engine's metrics.
func (e *Engine) Metrics() *Metrics { return e.metrics }

// Synced reports whether discovery has run and the caches of the running controllers have
// synced, on a Kubernetes version the engine reconciles on.
func (e *Engine) Synced() bool {
	if e.VersionRefusal() != "" {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.synced {
		return false
	}
	for _, c := range e.controllers {
		if !c.inf.shared.HasSynced() {
			return false
		}
	}
	return true
}

// ExternalAnswered is told that an external API answered a call (as opposed to being away): every
// object waiting on it goes back on its queue now (waiters.go).
func (e *Engine) ExternalAnswered() { e.waiters.answered() }

// apiServerBack is the gate's news that the API server answers again: the objects whose
// reconcile failed while it was gone go back on their queues now, not after their backoff.
func (e *Engine) apiServerBack() {
	e.log.Info("the API server answers again; reconciling what waited on it")
	e.apiWaiters.answered()
}

// Run starts the controllers whose resources are served and keeps looking for resources that
// appear later, until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	ctx = withWritable(ctx, e.cfg.Writable)
	var leaveEvents func()
	e.recorder, leaveEvents = e.events.join(ctx, e.cfg.Shard, e.kube)
	defer leaveEvents()
	e.gate = cached.NewAPIGate(ctx, func(ctx context.Context) error {
		return e.rest.Get().AbsPath("/readyz").Do(ctx).Error()
	}, e.apiServerBack, e.metrics.unreachableCalls)
	if t := e.cfg.Tenancy; t != nil {
		defer t.OnChange(e.enqueueNamespace)()
	}

	var wg sync.WaitGroup
	defer func() {
		e.stopInformers()
		wg.Wait()
		// Its shard's series go with it: its holder counts them from now on.
		e.metrics.forgetShard(e.cfg.Shard.String())
	}()
	wg.Add(1)
	// While objects wait on an external API, one is retried every canaryInterval (waiters.go).
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, func(context.Context) { e.waiters.retryOne() }, canaryInterval)
	}()
	t := time.NewTicker(e.cfg.DiscoveryInterval)
	defer t.Stop()
	for {
		e.discover(ctx, &wg)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// startController starts the informer, the child informers, the workers and the Run of kind k.
func (e *Engine) startController(ctx context.Context, k *Kind, wg *sync.WaitGroup) *Controller {
	c := newController(e, k)
	ns := e.cfg.Namespace
	if !k.Namespaced {
		ns = ""
	}
	c.inf = e.ensureInformer(ctx, k.Resource, ns, k, func(obj any) {
		c.enqueue(obj)
		e.wakeReferrers(k.Name, obj)
	})
	for _, gvr := range k.Children {
		if e.isServed(gvr) {
			e.ensureInformer(ctx, gvr, c.childNamespace(), nil, e.enqueueOwner)
		}
	}
	// Published only once built: Synced (behind /readyz) reads c.inf of every published controller.
	e.mu.Lock()
	e.controllers[k.Controller] = c
	e.mu.Unlock()
	e.log.Info("controller started", "controller", k.Controller, "workers", e.cfg.Workers)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.run(ctx)
	}()
	if k.Run != nil {
		// A warm engine's follower reads too: what it reads is what the warm reconciles compare.
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.Run(ctx, c)
		}()
	}
	return c
}

// Writable reports whether the engine may write: Config.Writable is nil or closed.
func (e *Engine) Writable() bool {
	select {
	case <-e.cfg.Writable:
		return true
	default:
		return e.cfg.Writable == nil
	}
}

// waitWritable waits until the engine may write, and reports false if ctx ended first.
func (e *Engine) waitWritable(ctx context.Context) bool {
	if e.cfg.Writable == nil {
		return true
	}
	select {
	case <-e.cfg.Writable:
		return true
	case <-ctx.Done():
		return false
	}
}

// enqueueNamespace queues every object of namespace, of every running controller: its binding or
// labels changed.
func (e *Engine) enqueueNamespace(namespace string) {
	e.mu.Lock()
	controllers := make([]*Controller, 0, len(e.controllers))
	for _, c := range e.controllers {
		controllers = append(controllers, c)
	}
	e.mu.Unlock()
	e.log.Info("namespace appeared or its labels changed (project binding, sandbox class access); reconciling its objects", "namespace", namespace)
	for _, c := range controllers {
		c.enqueueNamespace(namespace)
	}
}

// controller returns the running controller of kind name (its Kind), or nil.
func (e *Engine) controllerOfKind(name string) *Controller {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.controllers {
		if c.kind.Name == name {
			return c
		}
	}
	return nil
}

// Registry returns the registry of the engine's metrics.
func (e *Engine) Registry() *prometheus.Registry { return e.metrics.Registry }

// Log returns the engine's logger.
func (e *Engine) Log() *slog.Logger { return e.log }
