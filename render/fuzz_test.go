package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/internal/specgen"
	"evals.si/operator/schemas"
)

// FuzzRender renders arbitrary objects of each kind: rendering never panics, the same input
// always gives the same objects (also when the second rendering trusts an earlier check of the
// schema, SpecChecked), and validation accepts exactly what renders (with the same
// errors for what does not). The corpus holds the golden inputs, the admission cases and
// generated specs of every workload kind.
func FuzzRender(f *testing.F) {
	inputs, _ := filepath.Glob("../testdata/render/*/*/input.yaml")
	for _, in := range inputs {
		data, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(js)
	}
	for _, path := range []string{"../testdata/admission/valid.yaml", "../testdata/admission/invalid.yaml"} {
		docs, err := manifest.Read(path, nil)
		if err != nil {
			f.Fatal(err)
		}
		for _, d := range docs {
			js, _ := json.Marshal(d.Object.Object)
			f.Add(js)
		}
	}
	for seed := range uint64(20) {
		g := specgen.New(seed)
		for kind, spec := range map[string]map[string]any{"Evaluator": g.Evaluator(), "SandboxClass": g.SandboxClass(), "CheckpointServer": g.CheckpointServer()} {
			js, _ := json.Marshal(map[string]any{"apiVersion": evalsi.Group + "/" + evalsi.Version, "kind": kind,
				"metadata": map[string]any{"name": "gen", "namespace": "ns", "uid": "u"}, "spec": spec})
			f.Add(js)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return
		}
		verr := Validate(&unstructured.Unstructured{Object: m}, goldenOptions.Limits)
		first, err := Object(&unstructured.Unstructured{Object: m}, goldenOptions)
		if (verr == nil) != (err == nil) || verr != nil && verr.Error() != err.Error() {
			t.Fatalf("validation says %v, rendering %v", verr, err)
		}
		if err != nil {
			var errs schemas.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("a spec error that names no field: %v", err)
			}
			return
		}
		var a, b bytes.Buffer
		errA := WriteYAML(&a, first.Objects)
		// The second rendering is a reconcile's of a generation the engine has checked: it
		// decodes without the schema, and must render the same.
		var again map[string]any
		json.Unmarshal(data, &again)
		checked := goldenOptions
		checked.SpecChecked = true
		second, err := Object(&unstructured.Unstructured{Object: again}, checked)
		if err != nil {
			t.Fatalf("second render, the schema already checked, failed: %v", err)
		}
		// Strings YAML cannot hold (control characters) fail to print, the same way each time.
		errB := WriteYAML(&b, second.Objects)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("printing is not deterministic: %v, then %v", errA, errB)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("rendering is not deterministic:\n%s\n---\n%s", a.String(), b.String())
		}
	})
}
