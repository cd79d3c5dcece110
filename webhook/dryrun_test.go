package webhook

import (
	"encoding/json"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/internal/specgen"
	"evals.si/operator/render"
)

// childResources are the resources of the children the operator renders.
var childResources = map[string]schema.GroupVersionResource{
	"Deployment":   {Group: "apps", Version: "v1", Resource: "deployments"},
	"Service":      {Version: "v1", Resource: "services"},
	"ScaledObject": {Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"},
}

// generatedPerKind is how many specs of each workload kind the generator draws; about a fifth
// to a third of them pass validation.
const generatedPerKind = 1500

// TestChildrenPassServerDryRun is the property that admission accepts only what the API server
// takes: every valid admission case, every example, and every generated spec that validation
// accepts renders children that the real API server (with KEDA's ScaledObject CRD) takes with
// dryRun=All. A refusal prints the spec and the generator's seed.
func TestChildrenPassServerDryRun(t *testing.T) {
	ctx := testContext(t)
	if err := env.InstallKedaCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	ns := ensureNamespace(t, ctx, "dry-run")
	opts := render.Options{
		DefaultImage:     "evalsi/platform:1.4.0",
		VLLMImage:        "vllm/vllm-openai:v0.11.0",
		SandboxNamespace: ensureNamespace(t, ctx, "evalsi-sandbox"),
		APIURL:           "http://evalsid.evalsi.svc:8080",
		Autoscaling:      true,
	}
	refused := 0
	check := func(what string, obj *unstructured.Unstructured) bool {
		if obj.GetKind() != "SandboxClass" {
			obj.SetNamespace(ns)
		}
		obj.SetUID(types.UID("00000000-0000-0000-0000-000000000001"))
		if render.Validate(obj, nil) != nil {
			return false
		}
		res, err := render.Object(obj, opts)
		if err != nil {
			t.Errorf("%s: validation accepted what rendering refused: %v", what, err)
			return true
		}
		for _, child := range res.Objects {
			_, err := env.Dynamic().Resource(childResources[child.GetKind()]).Namespace(child.GetNamespace()).Apply(ctx,
				child.GetName(), child, metav1.ApplyOptions{FieldManager: "evalsi-operator", Force: true, DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				refused++
				spec, _ := json.Marshal(obj.Object["spec"])
				t.Errorf("%s: the API server refused %s %s: %v\nspec: %s", what, child.GetKind(), child.GetName(), err, spec)
			}
		}
		return true
	}

	for _, path := range []string{"../testdata/admission/valid.yaml", "../testdata/examples"} {
		for _, d := range readCases(t, path) {
			if d.Object.GroupVersionKind().Group == render.Group {
				check(d.Where(), d.Object)
			}
		}
	}
	for _, kind := range []string{"Evaluator", "SandboxClass", "CheckpointServer"} {
		accepted := 0
		for seed := range uint64(generatedPerKind) {
			g := specgen.New(seed)
			spec := map[string]func() map[string]any{
				"Evaluator": g.Evaluator, "SandboxClass": g.SandboxClass, "CheckpointServer": g.CheckpointServer,
			}[kind]()
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "evals.si/v1alpha1", "kind": kind,
				"metadata": map[string]any{"name": fmt.Sprintf("gen-%d", seed)}, "spec": spec,
			}}
			if check(fmt.Sprintf("%s seed %d", kind, seed), obj) {
				accepted++
			}
		}
		t.Logf("%s: %d of %d generated specs passed validation and were dry-run", kind, accepted, generatedPerKind)
		if accepted < 200 {
			t.Errorf("%s: only %d generated specs passed validation; the property needs at least 200", kind, accepted)
		}
	}
	if refused > 0 {
		t.Errorf("the API server refused %d children of specs that validation accepted", refused)
	}
}
