package render

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/golden"
	"evals.si/operator/reconcile/engine"
)

// goldenOptions are the operator settings of every golden rendering; a case may override them
// with an options.yaml beside its input.
var goldenOptions = Options{
	DefaultImage:     "evalsi/platform:1.4.0",
	VLLMImage:        "vllm/vllm-openai:v0.11.0",
	SandboxNamespace: "evalsi-sandbox",
	APIURL:           "http://evalsid.evalsi.svc:8080",
	Autoscaling:      true,
	Limits:           Limits{MaxPoolReplicas: DefaultMaxPoolReplicas},
}

// TestGoldenRender renders testdata/render/<kind>/<case>/input.yaml and compares the objects,
// stamped by the engine, with output.yaml.
func TestGoldenRender(t *testing.T) {
	inputs, err := filepath.Glob("../testdata/render/*/*/input.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, in := range inputs {
		dir := filepath.Dir(in)
		t.Run(filepath.Base(filepath.Dir(dir))+"/"+filepath.Base(dir), func(t *testing.T) {
			obj := readObject(t, in)
			opts := goldenOptions
			if data, err := os.ReadFile(filepath.Join(dir, "options.yaml")); err == nil {
				if err := yaml.UnmarshalStrict(data, &opts); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Object(obj, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, child := range r.Objects {
				// The golden files show the children as the operator applies them.
				if err := engine.StampChild(obj, child); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			if err := WriteYAML(&out, r.Objects); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join(dir, "output.yaml"), out.Bytes())
		})
	}
}

func readObject(t testing.TB, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestEveryKindRenders holds render's dispatch to the vocabulary's table of kinds: each kind has
// one renderer, and nothing else has.
func TestEveryKindRenders(t *testing.T) {
	var want []string
	for _, k := range evalsi.Kinds {
		want = append(want, k.Kind)
	}
	if diff := cmp.Diff(want, slices.Collect(maps.Keys(renderers)), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("renderers' kinds (-evalsi.Kinds +renderers):\n%s", diff)
	}
}

// TestSpecCheckedLeavesTheSchemaToTheCaller: a workload's spec is checked against its schema by
// the engine once a generation; rendering with SpecChecked only decodes it, and without it checks
// it at every call (admission, `validate`, `render`).
func TestSpecCheckedLeavesTheSchemaToTheCaller(t *testing.T) {
	for _, in := range []string{"evaluator/minimal", "sandboxclass/pod", "checkpointserver/minimal"} {
		t.Run(in, func(t *testing.T) {
			obj := readObject(t, filepath.Join("../testdata/render", in, "input.yaml"))
			// Only the schema refuses this image (its pattern): the Go type takes any string.
			if err := unstructured.SetNestedField(obj.Object, "-not-an-image", "spec", "image"); err != nil {
				t.Fatal(err)
			}
			_, err := Object(obj, goldenOptions)
			if err == nil || !strings.Contains(err.Error(), "/spec/image") {
				t.Fatalf("unchecked: want the schema's refusal of /spec/image, got %v", err)
			}
			checked := goldenOptions
			checked.SpecChecked = true
			if _, err := Object(obj, checked); err != nil {
				t.Fatalf("SpecChecked: the schema was checked again: %v", err)
			}
			if err := unstructured.SetNestedField(obj.Object, "x", "spec", "noSuchField"); err != nil {
				t.Fatal(err)
			}
			if _, err := Object(obj, checked); err == nil || !strings.Contains(err.Error(), "noSuchField") {
				t.Fatalf("SpecChecked: want an unknown field refused by the decoder, got %v", err)
			}
		})
	}
}
