package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"evals.si/operator/apiclient"
	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// FieldManager is the one field manager of every server-side apply the operator makes.
const FieldManager = "evalsi-operator"

// Config configures an engine.
type Config struct {
	// Rest is the client configuration; the engine wraps its transport to count requests.
	Rest *rest.Config
	// Namespace restricts every informer to one namespace; empty watches all.
	Namespace string
	// Controllers are the controller names to run; empty runs all.
	Controllers []string
	// Workers is the number of concurrent reconciles per controller.
	Workers int
	// Resync is how often every object is reconciled again without an event.
	Resync time.Duration
	// DiscoveryInterval is how often the engine looks for CRDs (its own, KEDA's) that appeared
	// or went away.
	DiscoveryInterval time.Duration
	// ReconcileTimeout bounds one reconcile.
	ReconcileTimeout time.Duration
	// Render are the rendering options; Autoscaling is set by the engine from discovery.
	Render render.Options
	// API configures the evalsid client of the EvalRun, OnlineEvalPolicy and TraceSource
	// controllers; without a URL they stay off.
	API apiclient.Options
	// RunPollInterval is how often a running EvalRun's run is read (with jitter).
	RunPollInterval time.Duration
	// Log is the engine's logger.
	Log *slog.Logger
}

// Engine runs the controllers.
type Engine struct {
	cfg      Config
	client   dynamic.Interface
	kube     kubernetes.Interface
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
}

// informerKey names one informer: a resource in a namespace ("" for all).
type informerKey struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// informer is a running shared informer and the operator's own writes it has not shown yet.
type informer struct {
	shared cache.SharedIndexInformer
	stop   chan struct{}
	// written holds objects the operator just wrote, until the informer has seen them, so that
	// a reconcile right after a write neither writes again nor conflicts with it.
	written cache.MutationCache
}

// remember keeps obj, just written by the operator, until the informer shows it or a newer version.
func (i *informer) remember(obj *unstructured.Unstructured) {
	dropManagedFields(obj)
	i.written.Mutation(obj)
}

// ownerIndex indexes children by the UID of their controller owner.
const ownerIndex = "owner"

// New returns an engine for cfg. It makes no request until Run.
func New(cfg Config) (*Engine, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 16
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
	rc.Wrap(m.countRequests)
	client, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	var api *apiclient.Client
	if cfg.API.URL != "" {
		opts := cfg.API
		opts.Observe = m.observeAPICall
		if api, err = apiclient.New(opts); err != nil {
			return nil, fmt.Errorf("creating the evalsid client: %w", err)
		}
	}
	return &Engine{
		cfg: cfg, client: client, kube: kube, metrics: m, log: cfg.Log, api: api,
		served:      map[schema.GroupVersionResource]bool{},
		informers:   map[informerKey]*informer{},
		controllers: map[string]*controller{},
		offLogged:   map[string]bool{},
	}, nil
}

// Kube returns the engine's typed client (for leader election and events).
func (e *Engine) Kube() kubernetes.Interface { return e.kube }

// Synced reports whether discovery has run and the caches of the running controllers have
// synced.
func (e *Engine) Synced() bool {
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

// Run starts the controllers whose CRDs are served and keeps looking for CRDs that appear
// later, until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.kube.CoreV1().Events(e.cfg.Namespace)})
	defer broadcaster.Shutdown()
	e.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: FieldManager})

	var wg sync.WaitGroup
	defer func() {
		e.stopInformers()
		wg.Wait()
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

// wanted returns the kinds of the selected controllers.
func (e *Engine) wanted() []*kind {
	var out []*kind
	for _, k := range kinds {
		if len(e.cfg.Controllers) == 0 || slices.Contains(e.cfg.Controllers, k.controller) {
			out = append(out, k)
		}
	}
	return out
}

// discover asks the API server which of the resources the selected controllers need are served,
// starts controllers and child informers that became available, and stops child informers of
// resources that went away. Objects whose children changed availability are reconciled again.
func (e *Engine) discover(ctx context.Context, wg *sync.WaitGroup) {
	e.refreshBindings(ctx)
	want := map[schema.GroupVersionResource]bool{}
	for _, k := range e.wanted() {
		want[k.gvr] = true
		for _, c := range k.children {
			want[c] = true
		}
	}
	served := e.servedResources(want)
	var changed []schema.GroupVersionResource
	e.mu.Lock()
	for gvr := range want {
		if served[gvr] != e.served[gvr] {
			changed = append(changed, gvr)
		}
	}
	e.served = served
	e.mu.Unlock()

	for _, k := range e.wanted() {
		if k.api && e.api == nil {
			if !e.offLogged[k.controller] {
				e.log.Warn("controller off: no evalsid URL (--api-url)", "controller", k.controller)
				e.offLogged[k.controller] = true
			}
			continue
		}
		if !served[k.gvr] {
			if !e.offLogged[k.controller] {
				e.log.Warn("controller off: its CRD is not served; it starts when the CRD is installed", "controller", k.controller, "resource", k.gvr.String())
				e.offLogged[k.controller] = true
			}
			continue
		}
		e.mu.Lock()
		c := e.controllers[k.controller]
		e.mu.Unlock()
		if c == nil {
			c = e.startController(ctx, k, wg)
		}
		for _, gvr := range k.children {
			if !slices.Contains(changed, gvr) {
				continue
			}
			if served[gvr] {
				e.log.Info("child resource served, watching it", "controller", k.controller, "resource", gvr.String())
				e.ensureInformer(ctx, gvr, k.childNamespace(e.cfg), true)
			} else {
				e.log.Warn("child resource no longer served", "controller", k.controller, "resource", gvr.String())
				e.stopInformer(informerKey{gvr, k.childNamespace(e.cfg)})
			}
			c.enqueueAll()
		}
	}
	e.mu.Lock()
	e.synced = true
	e.mu.Unlock()
}

// servedResources returns which of want the API server serves, by discovery of their groups.
func (e *Engine) servedResources(want map[schema.GroupVersionResource]bool) map[schema.GroupVersionResource]bool {
	out := map[schema.GroupVersionResource]bool{}
	byGV := map[schema.GroupVersion][]schema.GroupVersionResource{}
	for gvr := range want {
		byGV[gvr.GroupVersion()] = append(byGV[gvr.GroupVersion()], gvr)
	}
	for gv, gvrs := range byGV {
		list, err := e.kube.Discovery().ServerResourcesForGroupVersion(gv.String())
		if err != nil {
			e.mu.Lock()
			prev := e.served
			e.mu.Unlock()
			if !apierrors.IsNotFound(err) {
				// Keep what was known rather than tear controllers down on a passing error.
				e.log.Warn("discovery failed", "groupVersion", gv.String(), "err", err)
				for _, gvr := range gvrs {
					out[gvr] = prev[gvr]
				}
			}
			continue
		}
		for _, r := range list.APIResources {
			for _, gvr := range gvrs {
				if r.Name == gvr.Resource {
					out[gvr] = true
				}
			}
		}
	}
	return out
}

// startController starts the informer, the child informers and the workers of kind k.
func (e *Engine) startController(ctx context.Context, k *kind, wg *sync.WaitGroup) *controller {
	c := newController(e, k)
	ns := e.cfg.Namespace
	if !k.namespaced {
		ns = ""
	}
	inf := e.ensureInformer(ctx, k.gvr, ns, false)
	inf.shared.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueue(obj) },
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: func(obj any) { c.enqueue(obj) },
	})
	c.inf = inf
	for _, gvr := range k.children {
		if e.isServed(gvr) {
			e.ensureInformer(ctx, gvr, k.childNamespace(e.cfg), true)
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

// isServed reports whether discovery last saw gvr.
func (e *Engine) isServed(gvr schema.GroupVersionResource) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.served[gvr]
}

// ensureInformer starts (once) an informer of gvr in namespace. Child informers select by the
// managed-by label, index by controller owner and route events to the owner's controller. Every
// informer drops managedFields before objects enter its cache.
func (e *Engine) ensureInformer(ctx context.Context, gvr schema.GroupVersionResource, namespace string, child bool) *informer {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := informerKey{gvr, namespace}
	if i, ok := e.informers[key]; ok {
		return i
	}
	var tweak dynamicinformer.TweakListOptionsFunc
	indexers := cache.Indexers{}
	if child {
		tweak = func(o *metav1.ListOptions) { o.LabelSelector = evalsi.LabelManagedBy + "=" + evalsi.ManagedBy }
		indexers[ownerIndex] = indexByOwner
	} else {
		indexers[cache.NamespaceIndex] = cache.MetaNamespaceIndexFunc
	}
	gi := dynamicinformer.NewFilteredDynamicInformer(e.client, gvr, namespace, e.cfg.Resync, indexers, tweak)
	inf := gi.Informer()
	inf.SetTransform(dropManagedFields)
	i := &informer{shared: inf, stop: make(chan struct{})}
	// A child the operator created is there before the informer shows it (IncludeAdds); an owner
	// missing from the informer is gone, whatever status the operator last wrote for it.
	i.written = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), inf.GetStore(), cache.MutationCacheOptions{
		Indexer: inf.GetIndexer(), TTL: time.Minute, IncludeAdds: child, MaxCacheSize: 10000,
	})
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			i.written.OnAddOrUpdate(obj.(*unstructured.Unstructured))
			if child {
				e.enqueueOwner(obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			i.written.OnAddOrUpdate(obj.(*unstructured.Unstructured))
			if child && old.(*unstructured.Unstructured).GetResourceVersion() != obj.(*unstructured.Unstructured).GetResourceVersion() {
				e.enqueueOwner(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				i.written.OnDelete(u)
			}
			if child {
				e.enqueueOwner(obj)
			}
		},
	})
	e.informers[key] = i
	go inf.RunWithContext(stopContext(ctx, i.stop))
	return i
}

// stopContext returns a context that ends with ctx or when stop is closed.
func stopContext(ctx context.Context, stop chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}

func (e *Engine) stopInformer(key informerKey) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i, ok := e.informers[key]; ok {
		close(i.stop)
		delete(e.informers, key)
	}
}

func (e *Engine) stopInformers() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for key, i := range e.informers {
		close(i.stop)
		delete(e.informers, key)
	}
}

// childInformer returns the running informer of a child resource, or nil when it is not served.
func (e *Engine) childInformer(gvr schema.GroupVersionResource, namespace string) *informer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.informers[informerKey{gvr, namespace}]
}

// enqueueOwner queues the controller owner of a child.
func (e *Engine) enqueueOwner(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	child, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(child)
	if ref == nil {
		return
	}
	k := kindByName(ref.Kind)
	if k == nil {
		return
	}
	e.mu.Lock()
	c := e.controllers[k.controller]
	e.mu.Unlock()
	if c == nil {
		return
	}
	key := ref.Name
	if k.namespaced {
		key = child.GetNamespace() + "/" + ref.Name
	}
	c.queue.Add(key)
}

// indexByOwner indexes an object under the UID of its controller owner.
func indexByOwner(obj any) ([]string, error) {
	o, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}

// dropManagedFields keeps managedFields out of the cache: they are large and never read there.
func dropManagedFields(obj any) (any, error) {
	if o, err := meta.Accessor(obj); err == nil {
		o.SetManagedFields(nil)
	}
	return obj, nil
}
