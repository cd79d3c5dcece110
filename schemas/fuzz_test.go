package schemas

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/internal/manifest"
)

// FuzzValidate decodes arbitrary documents the way `validate` and the webhook do and validates
// them: nothing panics, and every error is a sentence naming a field of the document (a JSON
// pointer under /apiVersion, /kind, /metadata or /spec).
func FuzzValidate(f *testing.F) {
	for _, path := range []string{"../testdata/admission/invalid.yaml", "../testdata/admission/valid.yaml"} {
		docs, err := manifest.Read(path, os.Stdin)
		if err != nil {
			f.Fatal(err)
		}
		for _, d := range docs {
			data, _ := json.Marshal(d.Object.Object)
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := manifest.Decode("fuzz", bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, d := range docs {
			err := Validate(&unstructured.Unstructured{Object: d.Object.Object})
			errs, ok := err.(Errors)
			if err != nil && !ok {
				t.Fatalf("Validate returned %T: %v", err, err)
			}
			for _, e := range errs {
				top, _, _ := strings.Cut(strings.TrimPrefix(e.Pointer, "/"), "/")
				if e.Message == "" || !strings.HasPrefix(e.Pointer, "/") || !slices.Contains([]string{"apiVersion", "kind", "metadata", "spec"}, top) {
					t.Fatalf("error without a field of the document (/apiVersion, /kind, /metadata, /spec) or without a sentence: %#v", e)
				}
			}
		}
	})
}
