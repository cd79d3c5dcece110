package schemas

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/internal/manifest"
)

// FuzzValidate decodes arbitrary documents the way `validate` and the webhook do and validates
// them: nothing panics, and every error names a field under /spec or /metadata.
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
				if e.Pointer == "" || e.Message == "" {
					t.Fatalf("error without a field or a sentence: %#v", e)
				}
			}
		}
	})
}
