package workloads

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

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
			data, err := os.ReadFile(filepath.Join("../../testdata/render", tc.input, "input.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(data, &obj.Object); err != nil {
				t.Fatal(err)
			}
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
