package reconcile

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
	"evals.si/operator/shard"
)

var env *cluster.Cluster

const crdDir = "../chart/evalsi-crds/files/crds"

// shared is the package's control plane, started by the first test that calls testContext (or
// needCluster): pure tests start no process.
var shared = clustertest.New(cluster.Options{
	Nodes:        2,
	NodeCapacity: map[string]string{"nvidia.com/gpu": "8"},
	CRDDirs:      []string{crdDir},
	// The server-side shardSelector of TestShardedReplicas (alpha in 1.37, off by default).
	FeatureGates: []string{"ShardedListAndWatch=true"},
})

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// envMu orders the one write of env before every test's use of it. The tests that spend most of
// their time waiting (on the control plane, on evalsid's schedule, on API server outages) run in
// parallel, after the others: each in a namespace of its own, with engines limited to it, and
// touching nothing cluster-wide that another parallel test reads. Each calls needCluster first.
var envMu sync.Mutex

// needCluster starts the package's control plane if it has not started yet, and sets env.
func needCluster(t testing.TB) {
	envMu.Lock()
	defer envMu.Unlock()
	if env == nil {
		env = shared.Get(t)
	}
}

// testOptions are the rendering options of the engines under test.
var testOptions = render.Options{
	DefaultImage:     "evalsi/platform:test",
	VLLMImage:        "vllm/vllm-openai:test",
	SandboxNamespace: "evalsi-sandbox",
	APIURL:           "http://evalsid.evalsi.svc:8080",
}

// runningEngine is an engine under test with its captured log.
type runningEngine struct {
	*Operator
	logs *syncBuffer
	stop func()
	done chan struct{}
}

// counter returns the sum of the engine's counter name over its series that carry label value
// (any label), or over every series when value is "".
func (r runningEngine) counter(t testing.TB, name, value string) float64 {
	t.Helper()
	families, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if value == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == value }) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// reconcilesAfter returns a wait for n more reconciles of each of controllers than they have made
// now: a steady-state test counts the reconciles it finds nothing written over, so that a stalled
// loop cannot pass it.
func (r runningEngine) reconcilesAfter(t testing.TB, ctx context.Context, n float64, controllers ...string) func() {
	t.Helper()
	start := map[string]float64{}
	for _, c := range controllers {
		start[c] = r.counter(t, "evalsi_reconcile_total", c)
	}
	return func() {
		t.Helper()
		clustertest.Eventually(t, ctx, fmt.Sprintf("%v more reconciles of %v", n, controllers), func() error {
			for _, c := range controllers {
				if got := r.counter(t, "evalsi_reconcile_total", c) - start[c]; got < n {
					return fmt.Errorf("%v reconciles of %s", got, c)
				}
			}
			return nil
		})
	}
}

// wait waits until the engine's Run returned.
func (r runningEngine) wait(t testing.TB) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Error("engine did not stop within 30s")
	}
}

// startEngine runs an engine (no leader election) until the test ends.
func startEngine(t testing.TB, cfg Config) runningEngine {
	t.Helper()
	r := startEngineNoCleanup(t, cfg)
	t.Cleanup(func() {
		r.stop()
		r.wait(t)
	})
	return r
}

// startEngineNoCleanup runs an engine that the test stops itself.
func startEngineNoCleanup(t testing.TB, cfg Config) runningEngine {
	t.Helper()
	return startEngineUnder(t, context.Background(), cfg)
}

// startEngineUnder runs an engine under parent (which may carry a shard's tenure) that the test
// stops itself.
func startEngineUnder(t testing.TB, parent context.Context, cfg Config) runningEngine {
	t.Helper()
	return startWarmEngine(t, parent, cfg, nil)
}

// startWarmEngine runs an engine under parent that holds its writes until writable is closed
// (RunShard; nil: it writes at once), and that the test stops itself.
func startWarmEngine(t testing.TB, parent context.Context, cfg Config, writable <-chan struct{}) runningEngine {
	t.Helper()
	logs := &syncBuffer{}
	if cfg.Rest == nil {
		cfg.Rest = env.Config
	}
	if cfg.Render.DefaultImage == "" {
		cfg.Render = testOptions
	}
	if cfg.DiscoveryInterval == 0 {
		cfg.DiscoveryInterval = 300 * time.Millisecond
	}
	cfg.Log = slog.New(slog.NewTextHandler(io.MultiWriter(logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := e.RunShard(ctx, shard.Whole, writable); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	return runningEngine{Operator: e, logs: logs, stop: cancel, done: done}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testContext(t *testing.T) context.Context {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func client(gvr schema.GroupVersionResource, ns string) dynamic.ResourceInterface {
	r := env.Dynamic().Resource(gvr)
	if ns == "" {
		return r
	}
	return r.Namespace(ns)
}

func newNamespace(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	}}
	if name == "" {
		ns.SetGenerateName("test-")
	}
	got, err := client(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "").Create(ctx, ns, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return name
	}
	if err != nil {
		t.Fatal(err)
	}
	return got.GetName()
}

// create makes an evals.si object from YAML-ish nested maps.
func create(t testing.TB, ctx context.Context, gvr schema.GroupVersionResource, ns, kind, name string, spec map[string]any) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": kind,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
	got, err := client(gvr, ns).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// readyCondition returns the Ready condition's status, reason and message.
func readyCondition(obj *unstructured.Unstructured) (string, string, string) {
	return conditionOf(obj, "Ready")
}

// conditionOf returns the status, reason and message of obj's condition of type t.
func conditionOf(obj *unstructured.Unstructured, t string) (string, string, string) {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == t {
			s, _ := m["status"].(string)
			reason, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return s, reason, msg
		}
	}
	return "", "", ""
}

// waitReady waits until the object's Ready condition has status and reason for its current
// generation, and returns the object.
func waitReady(t *testing.T, ctx context.Context, gvr schema.GroupVersionResource, ns, name, status, reason string) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	clustertest.Eventually(t, ctx, fmt.Sprintf("%s %s Ready=%s/%s", gvr.Resource, name, status, reason), func() error {
		var err error
		got, err = client(gvr, ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, ok := got.Object["status"].(map[string]any); !ok {
			return fmt.Errorf("no status")
		}
		observed, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration")
		s, r, m := readyCondition(got)
		if s != status || r != reason || observed != got.GetGeneration() {
			return fmt.Errorf("Ready=%s reason %s (%s), observedGeneration %d of %d", s, r, m, observed, got.GetGeneration())
		}
		return nil
	})
	return got
}

func getObj(t testing.TB, ctx context.Context, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	got, err := client(gvr, ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// settled waits until the engine has sent no write for a second (events are sent
// asynchronously, after the status write that caused them), so that what follows measures
// steady state.
func settled(t *testing.T, ctx context.Context, e *engine.Engine) {
	t.Helper()
	last := writes(e)
	clustertest.Eventually(t, ctx, "the engine settles", func() error {
		time.Sleep(time.Second)
		now := writes(e)
		if now != last {
			last = now
			return fmt.Errorf("writes still being sent")
		}
		return nil
	})
}

// writes counts the write requests an engine made, other than its leader Lease.
func writes(e *engine.Engine) float64 {
	var n float64
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		// Every resource: children, statuses of every kind, finalizer patches, events; but not
		// the leader Lease, whose renewals are the one write a quiet leader makes.
		n += e.Metrics().KubeRequests(verb, "") - e.Metrics().KubeRequests(verb, "leases")
	}
	return n
}

func mergePatch(t *testing.T, ctx context.Context, gvr schema.GroupVersionResource, ns, name, patch string) {
	t.Helper()
	if _, err := client(gvr, ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
