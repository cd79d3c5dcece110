package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
	"evals.si/operator/reconcile/engine/cached"
)

// BenchmarkCachedObjectBytes measures the heap one cached object takes, by kind, for an
// autoscaled Evaluator and its children as the API server serves them once the pool is Ready:
// as decoded, with managedFields dropped (the informers' transform before pruning), and as the
// informers keep it now (cached.Form). The side-by-side comparison with a controller-runtime
// operator is in package bench.
func BenchmarkCachedObjectBytes(b *testing.B) {
	needCluster(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := env.InstallKedaCRDs(ctx); err != nil {
		b.Fatal(err)
	}
	ns := newNamespace(b, ctx, "")
	startEngine(b, Config{Namespace: ns, Controllers: []string{"evaluator"}})
	ev := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": "pool", "namespace": ns},
		"spec": map[string]any{
			"autoscaling": map[string]any{"minReplicas": int64(0), "maxReplicas": int64(10), "targetQueueDepth": int64(5)},
		},
	}}
	if _, err := client(evalsi.Evaluators, ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	clustertest.Eventually(b, ctx, "the pool Ready", func() error {
		got, err := client(evalsi.Evaluators, ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s, _, _ := conditionOf(got, evalsi.ConditionReady); s != "True" {
			return fmt.Errorf("Ready=%q", s)
		}
		return nil
	})
	kinds := []struct {
		gvr   schema.GroupVersionResource
		child bool
	}{{evalsi.Evaluators, false}, {evalsi.Deployments, true}, {evalsi.ServiceAccounts, true}, {evalsi.ScaledObjects, true}, {evalsi.TriggerAuthentications, true}, {evalsi.NetworkPolicies, true}}
	for range b.N {
		fmt.Printf("%-22s %10s %18s %10s\n", "bytes per object", "decoded", "no managedFields", "cached")
		for _, k := range kinds {
			list, err := client(k.gvr, ns).List(ctx, metav1.ListOptions{LabelSelector: map[bool]string{true: evalsi.LabelManagedBy + "=" + evalsi.ManagedBy}[k.child]})
			if err != nil || len(list.Items) == 0 {
				b.Fatalf("listing %s: %v (%d)", k.gvr.Resource, err, len(list.Items))
			}
			raw, err := json.Marshal(list.Items[0].Object)
			if err != nil {
				b.Fatal(err)
			}
			decoded := heapPerObject(b, raw, func(raw []byte) (any, error) { return decodeUnstructured(raw) })
			noManaged := heapPerObject(b, raw, func(raw []byte) (any, error) {
				u, err := decodeUnstructured(raw)
				u.SetManagedFields(nil)
				return u, err
			})
			inCache := heapPerObject(b, raw, func(raw []byte) (any, error) { return cached.Form(raw, k.child) })
			fmt.Printf("%-22s %10.0f %18.0f %10.0f\n", list.Items[0].GetKind(), decoded, noManaged, inCache)
			b.ReportMetric(inCache, k.gvr.Resource+"-B")
		}
	}
}

// decodeUnstructured decodes an object as the dynamic client does.
func decodeUnstructured(raw []byte) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	return u, u.UnmarshalJSON(raw)
}

// heapPerObject returns the heap bytes that each of many objects decoded from raw keeps alive.
func heapPerObject(b *testing.B, raw []byte, decode func([]byte) (any, error)) float64 {
	const n = 2000
	kept := make([]any, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range kept {
		o, err := decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		kept[i] = o
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return float64(after.HeapAlloc-before.HeapAlloc) / n
}

// BenchmarkRecoveryAfterEvalsidOutage measures how long after evalsid comes back from a 60 s
// outage the EvalRuns created during it have their runs (Pending with a run id), at the engine's
// default poll and backoff: their own per-object backoff had grown past a minute, and the first
// answered call requeues them all (engine/waiters.go).
func BenchmarkRecoveryAfterEvalsidOutage(b *testing.B) {
	needCluster(b)
	const runs = 50
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		ns := newNamespace(b, ctx, "")
		api := startEvalsid(b, evalsid.Schedule{})
		api.SetDown(true)
		cfg := api.apiConfig(ns)
		cfg.RunPollInterval = 0 // the default
		startEngine(b, cfg)
		for i := range runs {
			create(b, ctx, evalsi.EvalRuns, ns, "EvalRun", fmt.Sprintf("run-%02d", i), runSpec(nil))
		}
		time.Sleep(60 * time.Second)
		api.SetDown(false)
		back := time.Now()
		for i := range runs {
			waitPhase(b, ctx, ns, fmt.Sprintf("run-%02d", i), "Pending")
		}
		took := time.Since(back)
		b.ReportMetric(took.Seconds(), "s-to-converge")
		fmt.Printf("%d EvalRuns created during a 60 s evalsid outage: converged %.2fs after it came back\n", runs, took.Seconds())
		cancel()
	}
}
