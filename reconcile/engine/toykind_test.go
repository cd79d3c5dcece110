package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/shard"
)

var shared = clustertest.New(cluster.Options{})

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// A toy kind, Greeting (greetings.toys.example.com), added to the engine from this one file: a
// Greeting renders a ConfigMap holding its spec.text and reports the ConfigMap's name. It is what
// adding a kind takes: a Kind value with its resource and children, and a Reconciler that
// gathers, decides and acts through the engine.
var (
	greetings  = schema.GroupVersionResource{Group: "toys.example.com", Version: "v1", Resource: "greetings"}
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

func greetingKind() *engine.Kind {
	return &engine.Kind{
		Controller: "greeting", Name: "Greeting", Resource: greetings, Namespaced: true,
		ChildResources: []schema.GroupVersionResource{configMaps},
		Reconciler: engine.ReconcilerFunc(func(ctx context.Context, r *engine.Request) (engine.Outcome, error) {
			text, _, _ := unstructured.NestedString(r.Object.Object, "spec", "text")
			if text == "" {
				return engine.Outcome{}, engine.Terminalf(evalsi.ReasonInvalidSpec, "spec.text: required")
			}
			name := r.Object.GetName() + "-greeting"
			cm := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				// A bare object: SyncChildren makes it the Greeting's child.
				"metadata": map[string]any{"name": name, "namespace": r.Object.GetNamespace()},
				"data":     map[string]any{"text": text},
			}}
			if text == "unreadable" {
				cm.Object["dataa"] = map[string]any{} // a field ConfigMaps lack: server-side apply refuses it (500)
			}
			if _, err := r.Controller.SyncChildren(ctx, r, []*unstructured.Unstructured{cm}); err != nil {
				return engine.Outcome{}, err
			}
			return engine.Outcome{Status: &engine.Status{
				Fields:     map[string]any{"configMap": name},
				Conditions: []engine.Condition{engine.Ready(true, "Greeted", "the ConfigMap holds the text")},
			}}, nil
		}),
	}
}

// runEngine runs an engine of cfg (discovery every 300 ms, logs discarded) until the test ends,
// and fails the test if it does not stop within 30 s then.
func runEngine(t *testing.T, ctx context.Context, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.DiscoveryInterval = 300 * time.Millisecond
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ectx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ectx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the engine did not stop within 30s")
		}
	})
	return e
}

// greetingCRD is the toy kind's CRD, with a status subresource.
var greetingCRD = &unstructured.Unstructured{Object: map[string]any{
	"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
	"metadata": map[string]any{"name": "greetings.toys.example.com"},
	"spec": map[string]any{
		"group": "toys.example.com", "scope": "Namespaced",
		"names": map[string]any{"plural": "greetings", "singular": "greeting", "kind": "Greeting", "listKind": "GreetingList"},
		"versions": []any{map[string]any{
			"name": "v1", "served": true, "storage": true,
			"subresources": map[string]any{"status": map[string]any{}},
			"schema": map[string]any{"openAPIV3Schema": map[string]any{
				"type": "object", "x-kubernetes-preserve-unknown-fields": true,
			}},
		}},
	},
}}

// TestToyKind runs the engine with only the toy kind, holding one shard of two, on the real
// control plane: its child is
// made, its status written with the engine's conditions, nothing is written at steady state, a
// deleted child is made again, a spec change reaches the child, and a terminal refusal stalls the
// object until its spec changes.
func TestToyKind(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.ApplyCRDs(ctx, []*unstructured.Unstructured{greetingCRD}); err != nil {
		t.Fatal(err)
	}
	dyn := c.Dynamic()
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toys.example.com/v1", "kind": "Greeting",
		"metadata": map[string]any{"name": "hello", "namespace": "default"}, "spec": map[string]any{"text": "hi"},
	}}
	if _, err := dyn.Resource(greetings).Namespace("default").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The engine holds one shard of two, the Greeting's: its bare child is seen only because
	// SyncChildren stamps the Greeting's bucket on it.
	created, err := dyn.Resource(greetings).Namespace("default").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := shard.Shard{Index: 0, Count: 2}
	if !held.Contains(string(created.GetUID())) {
		held.Index = 1
	}
	e := runEngine(t, ctx, engine.Config{Rest: c.Config, Kinds: []*engine.Kind{greetingKind()}, Shard: held})

	data := func() (string, error) {
		cm, err := dyn.Resource(configMaps).Namespace("default").Get(ctx, "hello-greeting", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		text, _, _ := unstructured.NestedString(cm.Object, "data", "text")
		return text, nil
	}
	ready := func(reason string) func() error {
		return func() error {
			got, err := dyn.Resource(greetings).Namespace("default").Get(ctx, "hello", metav1.GetOptions{})
			if err != nil {
				return err
			}
			st, _, _ := unstructured.NestedMap(got.Object, "status")
			if r := engine.ReadyOf(st); r["reason"] != reason {
				return fmt.Errorf("Ready %v, want reason %s", r, reason)
			}
			return nil
		}
	}
	clustertest.Eventually(t, ctx, "the Greeting Ready with its ConfigMap", func() error {
		if err := ready("Greeted")(); err != nil {
			return err
		}
		_, err := data()
		return err
	})

	writes := func() float64 {
		var n float64
		for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			n += e.Metrics().KubeRequests(verb, "") - e.Metrics().KubeRequests(verb, "events")
		}
		return n
	}
	before := writes()
	time.Sleep(2 * time.Second) // several discovery passes and any echo of the last write
	if w := writes() - before; w != 0 {
		t.Errorf("%v writes at steady state, want 0", w)
	}

	if err := dyn.Resource(configMaps).Namespace("default").Delete(ctx, "hello-greeting", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the deleted ConfigMap made again", func() error { _, err := data(); return err })

	patch := func(body string) {
		if _, err := dyn.Resource(greetings).Namespace("default").Patch(ctx, "hello", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch(`{"spec":{"text":"hello"}}`)
	clustertest.Eventually(t, ctx, "the new text in the ConfigMap", func() error {
		text, err := data()
		if err == nil && text != "hello" {
			err = fmt.Errorf("text %q", text)
		}
		return err
	})

	// A child the API server refuses on every apply: its owner's readers are told why by a
	// Warning Event, while the apply is retried.
	patch(`{"spec":{"text":"unreadable"}}`)
	clustertest.Eventually(t, ctx, "a Warning Event of the refused child", func() error {
		events, err := c.Clientset().CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hello,reason=" + engine.ReasonChildRefused})
		if err != nil {
			return err
		}
		for _, ev := range events.Items {
			if ev.Type == "Warning" && strings.Contains(ev.Message, "ConfigMap default/hello-greeting") && strings.Contains(ev.Message, ".dataa: field not declared in schema") {
				return nil
			}
		}
		return fmt.Errorf("no such Event among %d", len(events.Items))
	})

	patch(`{"spec":{"text":""}}`)
	clustertest.Eventually(t, ctx, "the empty text refused", ready(evalsi.ReasonInvalidSpec))
	patch(`{"spec":{"text":"back"}}`)
	clustertest.Eventually(t, ctx, "a new spec Ready again", ready("Greeted"))
	got, err := dyn.Resource(greetings).Namespace("default").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
	for _, cond := range conds {
		if cond.(map[string]any)["type"] == evalsi.ConditionStalled {
			t.Errorf("Stalled kept after a new spec: %v", conds)
		}
	}
	if _, err := data(); apierrors.IsNotFound(err) {
		t.Error("the ConfigMap is gone")
	}
}

// TestSpecCheckedOnceAGeneration gives the toy kind a Validate: the engine asks it once per
// generation of an object, however often the object is reconciled, and tells every reconcile of
// a checked generation so (Request.SpecChecked), which is what lets a workload's rendering skip
// its schema.
func TestSpecCheckedOnceAGeneration(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.ApplyCRDs(ctx, []*unstructured.Unstructured{greetingCRD}); err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		checks     = map[int64]int{} // Validate calls by generation
		reconciles = map[int64]int{} // reconciles by generation
		unchecked  int               // reconciles told their spec was not checked
	)
	k := greetingKind()
	// Only this test's Greeting counts: the engine reconciles every Greeting, TestToyKind's too.
	k.Validate = func(obj *unstructured.Unstructured) error {
		if obj.GetName() != "checked" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		checks[obj.GetGeneration()]++
		return nil
	}
	inner := k.Reconciler
	k.Reconciler = engine.ReconcilerFunc(func(ctx context.Context, r *engine.Request) (engine.Outcome, error) {
		if r.Object.GetName() != "checked" {
			return inner.Reconcile(ctx, r)
		}
		mu.Lock()
		reconciles[r.Object.GetGeneration()]++
		if !r.SpecChecked {
			unchecked++
		}
		mu.Unlock()
		return inner.Reconcile(ctx, r)
	})
	runEngine(t, ctx, engine.Config{Rest: c.Config, Kinds: []*engine.Kind{k}, Resync: 200 * time.Millisecond})

	greetingsIn := c.Dynamic().Resource(greetings).Namespace("default")
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toys.example.com/v1", "kind": "Greeting",
		"metadata": map[string]any{"name": "checked", "namespace": "default"}, "spec": map[string]any{"text": "hi"},
	}}
	if _, err := greetingsIn.Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = greetingsIn.Delete(context.Background(), "checked", metav1.DeleteOptions{}) })
	reconciledTimes := func(generation int64, n int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			if reconciles[generation] < n {
				return fmt.Errorf("generation %d reconciled %d times, want %d", generation, reconciles[generation], n)
			}
			return nil
		}
	}
	clustertest.Eventually(t, ctx, "generation 1 reconciled at five resyncs", reconciledTimes(1, 5))
	if _, err := greetingsIn.Patch(ctx, "checked", types.MergePatchType, []byte(`{"spec":{"text":"hello"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "generation 2 reconciled at five resyncs", reconciledTimes(2, 5))

	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(map[int64]int{1: 1, 2: 1}, checks); diff != "" {
		t.Errorf("Validate calls by generation (-want +got):\n%s", diff)
	}
	if unchecked != 0 {
		t.Errorf("%d reconciles of a checked generation were not told so (Request.SpecChecked)", unchecked)
	}
}
