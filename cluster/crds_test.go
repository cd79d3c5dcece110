package cluster

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The kinds of design section 3: scope and short name.
var evalsiKinds = map[string]struct {
	plural     string
	namespaced bool
	short      string
}{
	"EvalRun":          {"evalruns", true, "evrun"},
	"OnlineEvalPolicy": {"onlineevalpolicies", true, "evpol"},
	"TraceSource":      {"tracesources", true, "evtrace"},
	"Evaluator":        {"evaluators", true, "evaluator"},
	"SandboxClass":     {"sandboxclasses", false, "sbc"},
	"CheckpointServer": {"checkpointservers", true, "evckpt"},
}

func TestCRDsServedInCategoryWithShortNames(t *testing.T) {
	list, err := env.Clientset().Discovery().ServerResourcesForGroupVersion("evals.si/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range list.APIResources {
		if strings.Contains(r.Name, "/") {
			if !strings.HasSuffix(r.Name, "/status") {
				t.Errorf("unexpected subresource %s", r.Name)
			}
			continue
		}
		want, ok := evalsiKinds[r.Kind]
		if !ok {
			t.Errorf("unexpected kind %s", r.Kind)
			continue
		}
		seen[r.Kind] = true
		if r.Name != want.plural || r.Namespaced != want.namespaced {
			t.Errorf("%s: resource %s namespaced %v, want %s namespaced %v", r.Kind, r.Name, r.Namespaced, want.plural, want.namespaced)
		}
		if len(r.ShortNames) != 1 || r.ShortNames[0] != want.short {
			t.Errorf("%s: short names %v, want [%s]", r.Kind, r.ShortNames, want.short)
		}
		if len(r.Categories) != 1 || r.Categories[0] != "evalsi" {
			t.Errorf("%s: categories %v, want [evalsi]", r.Kind, r.Categories)
		}
	}
	for kind := range evalsiKinds {
		if !seen[kind] {
			t.Errorf("%s is not served", kind)
		}
	}
	for _, r := range list.APIResources {
		if strings.HasSuffix(r.Name, "/status") {
			delete(seen, r.Kind)
		}
	}
	if len(seen) != 0 {
		t.Errorf("kinds without a status subresource: %v", seen)
	}
}

func TestEvalRunSpecIsImmutable(t *testing.T) {
	ctx := testContext(t)
	ns := namespace(t, ctx)
	runs := env.Dynamic().Resource(schema.GroupVersionResource{Group: "evals.si", Version: "v1alpha1", Resource: "evalruns"}).Namespace(ns)
	run := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
		"metadata": map[string]any{"name": "smoke"},
		"spec": map[string]any{
			"suite":  "smoke",
			"target": map[string]any{"endpoint": map[string]any{"url": "http://model:8000/v1", "model": "m"}},
			"trials": int64(1),
		},
	}}
	created, err := runs.Create(ctx, run, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	changed := created.DeepCopy()
	unstructured.SetNestedField(changed.Object, int64(3), "spec", "trials")
	_, err = runs.Update(ctx, changed, metav1.UpdateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec is immutable: create a new EvalRun") {
		t.Fatalf("changing a nested spec field: got %v, want the CEL message", err)
	}
	added := created.DeepCopy()
	unstructured.SetNestedField(added.Object, "extra", "spec", "parameters", "temperature")
	if _, err = runs.Update(ctx, added, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Fatalf("adding a spec field: got %v, want the CEL message", err)
	}

	labelled := created.DeepCopy()
	labelled.SetLabels(map[string]string{"team": "a"})
	if _, err := runs.Update(ctx, labelled, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("changing labels: %v", err)
	}
}

func TestKedaScaledObjectCRDFromModule(t *testing.T) {
	ctx := testContext(t)
	if err := env.InstallKedaCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := env.Clientset().Discovery().ServerResourcesForGroupVersion("keda.sh/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.APIResources {
		if r.Name == "scaledobjects" {
			return
		}
	}
	t.Errorf("keda.sh/v1alpha1 serves %v, want scaledobjects", list.APIResources)
}
