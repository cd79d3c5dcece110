package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"evals.si/operator/apiclient"
	"evals.si/operator/internal/pki"
	"evals.si/operator/internal/tenancy"
	"evals.si/operator/reconcile/apicall"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/reconcile/engine/cached"
	"evals.si/operator/reconcile/monitors"
	"evals.si/operator/reconcile/process"
	"evals.si/operator/reconcile/runs"
	"evals.si/operator/reconcile/workloads"
	"evals.si/operator/render"
	"evals.si/operator/shard"
)

// Config configures the operator: its engine, its kinds, and their evalsid client.
type Config struct {
	// Rest is the client configuration; its QPS and Burst are each resource's budget.
	Rest *rest.Config
	// Namespace restricts everything to one namespace; empty watches all.
	Namespace string
	// Controllers are the controller names to run (ControllerNames); empty runs all.
	Controllers []string
	// Workers is the number of concurrent reconciles per controller (32 when 0).
	Workers int
	// Resync is how often every object is reconciled again without an event.
	Resync time.Duration
	// DiscoveryInterval is how often the engine looks for CRDs (its own, KEDA's) that appeared
	// or went away.
	DiscoveryInterval time.Duration
	// ReconcileTimeout bounds one reconcile.
	ReconcileTimeout time.Duration
	// Render are the rendering options of the workload kinds; Autoscaling is set from discovery.
	Render render.Options
	// API configures the evalsid client of the EvalRun, OnlineEvalPolicy and TraceSource kinds;
	// without a URL they stay off.
	API apiclient.Options
	// RunPollInterval is how often a running EvalRun's run is read (with jitter).
	RunPollInterval time.Duration
	// EvalRunTTL is how long a finished EvalRun stays (0 keeps it; runs/ttl.go).
	EvalRunTTL time.Duration
	// ClassRecheck is how often an object waiting on its SandboxClass or service account looks
	// again without an event (30 s when 0).
	ClassRecheck time.Duration
	// Log is the operator's logger.
	Log *slog.Logger
	// Sharded says the replica runs engines per shard (process.Config.Shards above 1): the
	// requests of what it runs once for them all (Lease rounds, discovery, the namespaces' reader)
	// are counted under shard="process", not under the whole's "0/1", which it never runs.
	Sharded bool
	// AllowUnsupportedMinor reconciles on a Kubernetes minor other than evalsi.KubernetesMinor
	// (with a warning); by default the engine refuses to.
	AllowUnsupportedMinor bool
	// Metrics, when set, are what the operator and its process record into, for a caller that
	// reads them itself; a new set when nil.
	Metrics *engine.Metrics
}

// defaultClassRecheck is how often an object waiting on its SandboxClass looks again without an
// event, unless Config says otherwise.
const defaultClassRecheck = 30 * time.Second

// ControllerNames lists the controllers that --controllers accepts.
func ControllerNames() []string { return engine.ControllerNames(kinds(Config{}, nil, nil, nil)) }

// kinds are every kind the operator runs, in a fixed order: the workload kinds render into
// Kubernetes objects, the others are kept in evalsid through api (nil: they stay off). They read
// namespaces' bindings, and the EvalRuns' runs through follower (nil: their own).
func kinds(cfg Config, api *apiclient.Client, namespaces *tenancy.Namespaces, follower *runs.Follower) []*engine.Kind {
	w := workloads.Options{Render: cfg.Render, ClassRecheck: cmp.Or(cfg.ClassRecheck, defaultClassRecheck)}
	if namespaces != nil {
		w.NamespaceLabels = func(ns string) map[string]string {
			labels, _ := namespaces.Labels(ns)
			return labels
		}
	}
	return []*engine.Kind{
		workloads.Evaluators(w),
		workloads.SandboxClasses(w),
		workloads.CheckpointServers(w),
		runs.EvalRuns(api, runs.Options{Follower: follower, PollInterval: cfg.RunPollInterval, TTL: cfg.EvalRunTTL, ClassRefusal: w.ClassRefusal, ClassRecheck: w.ClassRecheck}),
		monitors.OnlineEvalPolicies(api),
		monitors.TraceSources(api),
	}
}

// Operator is the engine with the operator's kinds, and the namespaces it reads bindings from: one
// engine for every object (Run), or one per shard this replica holds (RunShard).
type Operator struct {
	// Engine is the engine of every object; the engines of shards share its metrics.
	*engine.Engine
	cfg        Config
	api        *apiclient.Client
	kube       kubernetes.Interface
	namespaces *tenancy.Namespaces
	// follower reads the running EvalRuns' runs for every engine of this process.
	follower *runs.Follower

	mu sync.Mutex
	// running are the engines that run now, by shard.
	running map[shard.Shard]*engine.Engine
	// namespaceUsers are the engines that read the namespaces' bindings now, and stopNamespaces
	// ends their watch (watchNamespaces).
	namespaceUsers int
	stopNamespaces context.CancelFunc
}

// New returns an operator for cfg. It makes no request until Run.
func New(cfg Config) (*Operator, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	op := &Operator{cfg: cfg, namespaces: tenancy.NewNamespaces(), follower: runs.NewFollower(), running: map[shard.Shard]*engine.Engine{}}
	var api *apiclient.Client
	if cfg.API.URL != "" {
		opts := cfg.API
		// Outermost: a call refused for an ended tenure is not counted as a call.
		opts.Interceptors = append([]connect.Interceptor{apicall.FenceCalls()}, opts.Interceptors...)
		opts.Observe = func(method, code string, took time.Duration) {
			op.Metrics().ObserveAPICall(method, code, took)
			if apicall.Answered(code) {
				op.ExternalAnswered()
			}
		}
		var err error
		if api, err = apiclient.New(opts); err != nil {
			return nil, fmt.Errorf("creating the evalsid client: %w", err)
		}
	}
	op.api = api
	e, err := op.newEngine(shard.Whole, cfg.Metrics, nil)
	if err != nil {
		return nil, err
	}
	op.Engine, op.kube = e, e.Kube()
	return op, nil
}

// newEngine returns an engine of the operator's kinds for shard s, reading bindings from
// namespaces, recording into metrics (nil: its own), and asking the API server's discovery
// through, and writing Events through, the operator's first engine's.
func (op *Operator) newEngine(s shard.Shard, metrics *engine.Metrics, writable <-chan struct{}) (*engine.Engine, error) {
	cfg := op.cfg
	// The first engine's own, shared by those of the shards.
	var discovery *cached.Discovery
	var events *engine.Events
	requestLabel := "" // its shard's
	if op.Engine != nil {
		discovery, events = op.Discovery(), op.Events()
	} else if cfg.Sharded {
		requestLabel = ProcessRequests
	}
	return engine.New(engine.Config{
		Rest: cfg.Rest, Namespace: cfg.Namespace, Kinds: kinds(cfg, op.api, op.namespaces, op.follower), Controllers: cfg.Controllers,
		Workers: cfg.Workers, Resync: cfg.Resync, DiscoveryInterval: cfg.DiscoveryInterval, ReconcileTimeout: cfg.ReconcileTimeout,
		Tenancy: projects{op.namespaces}, Shard: s, Metrics: metrics, Writable: writable, Log: cfg.Log, AllowUnsupportedMinor: cfg.AllowUnsupportedMinor,
		Discovery: discovery, Events: events, RequestLabel: requestLabel,
	})
}

// namespacesWait bounds how long Run waits for the first read of the namespaces' bindings before
// it reconciles: an operator that may not read them acts as if no namespace were bound.
const namespacesWait = 30 * time.Second

// Run reconciles every object until ctx ends.
func (op *Operator) Run(ctx context.Context) error { return op.RunShard(ctx, shard.Whole, nil) }

// RunShard reads the namespaces' bindings (all of them, or the operator's one namespace) and
// reconciles the objects of s until ctx ends: with the operator's engine for the whole, else with
// an engine of s's own, which ends with ctx. Writable, when set, holds its writes until it is
// closed (engine.Config.Writable): s's engine then warms its caches first, with one of its own
// even for the whole.
func (op *Operator) RunShard(ctx context.Context, s shard.Shard, writable <-chan struct{}) error {
	e := op.Engine
	if !s.IsWhole() || writable != nil {
		var err error
		if e, err = op.newEngine(s, op.Metrics(), writable); err != nil {
			return err
		}
	}
	op.mu.Lock()
	op.running[s] = e
	op.mu.Unlock()
	defer func() {
		op.mu.Lock()
		if op.running[s] == e { // not yet another engine of s (a warm one handed over)
			delete(op.running, s)
		}
		op.mu.Unlock()
	}()
	defer op.watchNamespaces(ctx)()
	wait, cancel := context.WithTimeout(ctx, namespacesWait)
	if !op.namespaces.WaitForSync(wait) && ctx.Err() == nil {
		op.Log().Warn("the namespaces' project bindings are not read; every namespace acts in the project named like it until they are")
	}
	cancel()
	return e.Run(ctx)
}

// watchNamespaces reads the namespaces' bindings while an engine of this process runs: the
// engines of its shards share one watch (or one poll of the operator's namespace), started for
// the first and stopped after the last. It returns the engine's release.
func (op *Operator) watchNamespaces(ctx context.Context) (release func()) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.namespaceUsers == 0 {
		var wctx context.Context
		wctx, op.stopNamespaces = context.WithCancel(context.WithoutCancel(ctx))
		op.namespaces.Watch(wctx, op.kube, op.cfg.Namespace)
	}
	op.namespaceUsers++
	return func() {
		op.mu.Lock()
		defer op.mu.Unlock()
		if op.namespaceUsers--; op.namespaceUsers == 0 {
			op.stopNamespaces()
		}
	}
}

// engines returns the engines that run now.
func (op *Operator) engines() []*engine.Engine {
	op.mu.Lock()
	defer op.mu.Unlock()
	out := make([]*engine.Engine, 0, len(op.running))
	for _, e := range op.running {
		out = append(out, e)
	}
	return out
}

// Synced reports whether every running engine that may write has synced (those that warm their
// caches for a shard not yet held are not counted); false when none runs.
func (op *Operator) Synced() bool {
	writing := 0
	for _, e := range op.engines() {
		if !e.Writable() {
			continue
		}
		if !e.Synced() {
			return false
		}
		writing++
	}
	return writing > 0
}

// ShardSynced reports whether the engine of s runs and has synced.
func (op *Operator) ShardSynced(s shard.Shard) bool {
	op.mu.Lock()
	e, ok := op.running[s]
	op.mu.Unlock()
	return ok && e.Synced()
}

// VersionRefusal says why the running engines do not reconcile on this cluster, "" when they
// do (or none runs).
func (op *Operator) VersionRefusal() string {
	for _, e := range op.engines() {
		if why := e.VersionRefusal(); why != "" {
			return why
		}
	}
	return ""
}

// ExternalAnswered tells every running engine that evalsid answered (engine.ExternalAnswered).
func (op *Operator) ExternalAnswered() {
	for _, e := range op.engines() {
		e.ExternalAnswered()
	}
}

// projects is the engine's Tenancy: the project a namespace is bound to (its Namespace's label,
// read by package tenancy), else the one named like it; an object may name no other.
type projects struct{ namespaces *tenancy.Namespaces }

// Project returns the project obj acts in (render.Project).
func (p projects) Project(obj *unstructured.Unstructured) (string, error) {
	bindings, ok := p.namespaces.Bindings(obj.GetNamespace())
	if !ok {
		bindings = map[string]string{}
	}
	return render.Project(obj, render.Options{Limits: render.Limits{ProjectBindings: bindings}})
}

// OnChange calls fn with each namespace whose labels change.
func (p projects) OnChange(fn func(namespace string)) (stop func()) {
	return p.namespaces.OnLabelsChanged(fn)
}

// ManagerConfig configures the operator's process: the operator and its endpoints and leader
// election.
type ManagerConfig struct {
	Engine Config
	process.Config
}

// ProcessRequests is the shard label of the requests a sharded replica sends once for all its
// shards (Config.Sharded).
const ProcessRequests = "process"

// RunManager runs the operator in its process (package process) until ctx ends.
func RunManager(ctx context.Context, cfg ManagerConfig) error {
	cfg.Engine.Sharded = cfg.Config.Shards > 1
	op, err := New(cfg.Engine)
	if err != nil {
		return err
	}
	if err := op.Registry().Register(certificates(cfg)); err != nil {
		return fmt.Errorf("registering the certificates' metric: %w", err)
	}
	return process.Run(ctx, cfg.Config, op)
}

// certificates are the files of the certificates the operator serves or presents, whose expiry
// it reports: the metrics endpoint's, and its client certificate and CA for evalsid.
func certificates(cfg ManagerConfig) pki.Expiry {
	certs := pki.Expiry{}
	if dir := cfg.Config.MetricsCertDir; dir != "" {
		certs["metrics"] = filepath.Join(dir, "tls.crt")
	}
	if f := cfg.Engine.API.ClientCert; f != "" {
		certs["evalsid-client"] = f
	}
	if f := cfg.Engine.API.CAFile; f != "" {
		certs["evalsid-ca"] = f
	}
	return certs
}
