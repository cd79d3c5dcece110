package workloads

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/internal/manifest"
	"evals.si/operator/reconcile/engine"
)

// TestWorkloadKindsCheckTheirSchema: each workload kind gives the engine its schema to check
// once a generation (Kind.Validate), which is what lets its reconciles render without it
// (render.Options.SpecChecked).
func TestWorkloadKindsCheckTheirSchema(t *testing.T) {
	for name, tc := range map[string]struct {
		kind  func(Options) *engine.Kind
		input string
	}{
		"Evaluator":        {Evaluators, "evaluator/minimal"},
		"SandboxClass":     {SandboxClasses, "sandboxclass/pod"},
		"CheckpointServer": {CheckpointServers, "checkpointserver/minimal"},
	} {
		t.Run(name, func(t *testing.T) {
			k := tc.kind(Options{})
			if k.Validate == nil {
				t.Fatal("no Validate: every reconcile would check the schema again")
			}
			docs, err := manifest.Read(filepath.Join("../../testdata/render", tc.input, "input.yaml"), nil)
			if err != nil || len(docs) != 1 {
				t.Fatalf("reading %s: %d documents, %v", tc.input, len(docs), err)
			}
			obj := docs[0].Object
			if err := k.Validate(obj); err != nil {
				t.Fatalf("a valid spec refused: %v", err)
			}
			// Only the schema refuses this image (its pattern).
			if err := unstructured.SetNestedField(obj.Object, "-not-an-image", "spec", "image"); err != nil {
				t.Fatal(err)
			}
			if err := k.Validate(obj); err == nil || !strings.Contains(err.Error(), "/spec/image") {
				t.Fatalf("want the schema's refusal of /spec/image, got %v", err)
			}
		})
	}
}
