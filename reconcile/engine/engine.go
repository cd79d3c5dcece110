// Package engine is the operator's kind-neutral engine: discovery, informers and the
// caches tuned to what it reads, a rate-limited queue and workers per kind, server-side apply of
// children, one status writer, one finalizer lifecycle for objects kept in an external API, and
// the metrics of all of it. It names no evals.si kind: kinds register themselves (Kind) with what
// they watch, own and need, and are reconciled through their Reconciler. reconcile/doc.go walks
// the flow.
//
// What its informers keep of each object, and the codecs that read objects off the wire into it,
// are the leaf package cached, which knows nothing of the engine. The files here are one concept
// each, and each uses only files beneath it:
//   - the parts an engine shares with its controllers (services.go): clients, logger, metrics,
//     Event recorder, what discovery saw (served.go), the running informers (informer.go), the
//     spec checks passed, the objects waiting on an API, the version's verdict, and the status
//     and finalizer writes (status.go, finalizers.go) made through them;
//   - the contract with kinds (kind.go): Kind, Request, Reconciler and the Controller a Request
//     carries, which embeds the services and holds nothing else of its engine;
//   - the Controller's queue and workers (controller.go), and what kinds call on it: SyncChildren
//     (children.go) and the finalizer lifecycle for external objects (lifecycle.go);
//   - the Engine (engine.go), which makes the services; its informers (informers.go), the
//     wake-ups of referrers (referrers.go), discovery, which starts controllers
//     (discovery.go), and Run (run.go).
package engine

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"evals.si/operator/reconcile/engine/cached"
	"evals.si/operator/shard"
)

// restClientConfig is the configuration of the engine's REST client, over rc: it sends JSON and
// decodes errors in either media type, since built-in children are read as protobuf
// (cached/childproto.go) and the Status of a refused request comes in the media type its request
// accepted.
func restClientConfig(rc *rest.Config) *rest.Config {
	c := dynamic.ConfigFor(rc)
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return c
}

// Engine runs the controllers of its kinds: it discovers which are served and starts and stops
// their controllers and informers, handing each controller the services it shares with them.
type Engine struct {
	services
	cfg Config
	// discovery answers which resources are served and the server's version (Config.Discovery).
	discovery *cached.Discovery
	// events writes the engine's Events (Config.Events).
	events *Events

	mu          sync.Mutex
	controllers map[string]*Controller
	synced      bool

	// offLogged remembers why each controller was last said to be off, so that a reason is
	// written once; lastVersionWhy is the version verdict last logged. Only Run's goroutine
	// uses them.
	offLogged      map[string]string
	lastVersionWhy string
	gate           *cached.APIGate
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
		cfg: cfg,
		services: services{
			namespace: cfg.Namespace, shard: cfg.Shard, workers: cfg.Workers, reconcileTimeout: cfg.ReconcileTimeout,
			discoveryInterval: cfg.DiscoveryInterval, clock: cfg.Clock, tenancy: cfg.Tenancy, writable: cfg.Writable,
			client: client, kube: kube, rest: rcl, metrics: m, log: cfg.Log,
			served: newServedSet(), informers: newInformerSet(), validated: &validations{}, refusal: &atomic.Value{},
			waiters:    &waiters{away: IsAway, requeued: m.requeuedOnAnswer},
			apiWaiters: &waiters{away: cached.Unreachable, requeued: m.requeuedOnAPIServer},
		},
		discovery: d, events: events,
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
