package render

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// FuzzRender renders arbitrary specs of each kind: rendering never panics, and the same input
// always gives the same objects.
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
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return
		}
		first, err := Object(&unstructured.Unstructured{Object: m}, goldenOptions)
		if err != nil {
			return
		}
		var a, b bytes.Buffer
		errA := WriteYAML(&a, first.Objects)
		var again map[string]any
		json.Unmarshal(data, &again)
		second, err := Object(&unstructured.Unstructured{Object: again}, goldenOptions)
		if err != nil {
			t.Fatalf("second render failed: %v", err)
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
