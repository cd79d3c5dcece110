package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"evals.si/operator/apiclient"
	"evals.si/operator/evalsi"
)

// FieldManager is the one field manager of every server-side apply the operator makes.
const FieldManager = evalsi.FieldManager

// Engine runs the controllers.
type Engine struct {
	cfg    Config
	client dynamic.Interface
	kube   kubernetes.Interface
	// rest is the dynamic client's kind of REST client (JSON), for what the engine decodes
	// itself: children (childListWatch, apply) and the answers to status writes.
	rest     rest.Interface
	recorder record.EventRecorder
	metrics  *Metrics
	log      *slog.Logger
	api      *apiclient.Client

	// afterCreateRun, when set (tests), runs right after CreateRun returns and before the status
	// is written; an error from it ends the reconcile there, as a crash would.
	afterCreateRun func() error

	mu     sync.Mutex
	served map[schema.GroupVersionResource]bool
	// bindings are the namespaces bound to a project by their evals.si/project label, and
	// nsLabels every namespace's labels (refreshBindings); replaced whole, never changed in place.
	bindings    map[string]string
	nsLabels    map[string]map[string]string
	informers   map[informerKey]*informer
	controllers map[string]*controller
	synced      bool

	// offLogged remembers controllers whose "CRD not served" line was written; only Run's
	// goroutine uses it.
	offLogged map[string]bool
	// refusal is why the engine does not reconcile on this server's Kubernetes version ("" when
	// it does); lastVersionWhy is the version verdict last logged (Run's goroutine only).
	refusal        atomic.Value
	lastVersionWhy string
	// waiters are the objects waiting for evalsid to come back.
	waiters apiWaiters
	// runs are the running EvalRuns' runs, read in batches.
	runs runFollower
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
	if cfg.RunPollInterval <= 0 {
		cfg.RunPollInterval = 10 * time.Second
	}
	for _, name := range cfg.Controllers {
		if kindByController(name) == nil {
			return nil, fmt.Errorf("unknown controller %q (known: %v)", name, ControllerNames())
		}
	}
	m := NewMetrics()
	rc := rest.CopyConfig(cfg.Rest)
	limitPerResource(rc)
	rc.Wrap(m.countRequests)
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("creating the HTTP client: %w", err)
	}
	client, err := dynamic.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	rcl, err := rest.UnversionedRESTClientForConfigAndClient(dynamic.ConfigFor(rc), hc)
	if err != nil {
		return nil, fmt.Errorf("creating REST client: %w", err)
	}
	kube, err := kubernetes.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	e := &Engine{
		cfg: cfg, client: client, kube: kube, rest: rcl, metrics: m, log: cfg.Log,
		served:      map[schema.GroupVersionResource]bool{},
		informers:   map[informerKey]*informer{},
		controllers: map[string]*controller{},
		offLogged:   map[string]bool{},
	}
	if cfg.API.URL != "" {
		opts := cfg.API
		opts.Observe = func(method, code string) {
			m.observeAPICall(method, code)
			e.waiters.observe(code)
		}
		if e.api, err = apiclient.New(opts); err != nil {
			return nil, fmt.Errorf("creating the evalsid client: %w", err)
		}
	}
	return e, nil
}

// Kube returns the engine's typed client (for leader election and events).
func (e *Engine) Kube() kubernetes.Interface { return e.kube }

// Synced reports whether discovery has run and the caches of the running controllers have
// synced, on a Kubernetes version the engine reconciles on.
func (e *Engine) Synced() bool {
	if e.versionRefusal() != "" {
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

// eventKeys bounds each of the event recorder's three caches (similar events aggregated, repeats
// counted, spam filtered per object), which keep a key and a record per distinct event: at
// client-go's 4,096 they grew with every pool that had an event (a heap profile held about 1.5 MB
// more of them at 2,000 pools than at 500). A repeat of an event pushed out by over a thousand newer ones is recorded as a
// new Event instead of counted.
const eventKeys = 1024

// Run starts the controllers whose CRDs are served and keeps looking for CRDs that appear
// later, until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: eventKeys}))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.kube.CoreV1().Events(e.cfg.Namespace)})
	defer broadcaster.Shutdown()
	e.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: FieldManager})

	var wg sync.WaitGroup
	defer func() {
		e.stopInformers()
		wg.Wait()
	}()
	if e.api != nil {
		wg.Add(1)
		// While objects wait on evalsid, one is retried every canaryInterval (apiwait.go); the
		// running EvalRuns' runs are read every poll interval (runfollower.go).
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, func(context.Context) { e.waiters.retryOne() }, canaryInterval)
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, e.sweepRuns, e.cfg.RunPollInterval)
		}()
	}
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

// startController starts the informer, the child informers and the workers of kind k.
func (e *Engine) startController(ctx context.Context, k *kind, wg *sync.WaitGroup) *controller {
	c := newController(e, k)
	ns := e.cfg.Namespace
	if !k.namespaced {
		ns = ""
	}
	c.inf = e.ensureInformer(ctx, k.gvr, ns, false, c.enqueue)
	for _, gvr := range k.children {
		if e.isServed(gvr) {
			e.ensureInformer(ctx, gvr, k.childNamespace(e.cfg), true, e.enqueueOwner)
		}
	}
	// Published only once built: Synced (behind /readyz) reads c.inf of every published controller.
	e.mu.Lock()
	e.controllers[k.controller] = c
	e.mu.Unlock()
	e.log.Info("controller started", "controller", k.controller, "workers", e.cfg.Workers)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.run(ctx)
	}()
	return c
}
