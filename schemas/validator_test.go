package schemas

import (
	"os"
	"testing"

	"evals.si/operator/internal/manifest"
)

// ExpectAnnotation on a test case holds the error the validator must give first.
const expectAnnotation = "test.evals.si/expect"

func readCases(t *testing.T, path string) []manifest.Document {
	t.Helper()
	docs, err := manifest.Read(path, os.Stdin)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func TestInvalidSpecsNameTheField(t *testing.T) {
	docs := readCases(t, "../testdata/admission/invalid.yaml")
	if len(docs) < 40 {
		t.Fatalf("%d invalid cases, want at least 40", len(docs))
	}
	for _, d := range docs {
		t.Run(d.Object.GetKind()+"/"+d.Object.GetName(), func(t *testing.T) {
			want := d.Object.GetAnnotations()[expectAnnotation]
			err := Validate(d.Object)
			errs, ok := err.(Errors)
			if !ok || len(errs) == 0 {
				t.Fatalf("Validate = %v, want %q", err, want)
			}
			if errs[0].String() != want {
				t.Errorf("first error %q, want %q (all: %v)", errs[0].String(), want, errs)
			}
		})
	}
}

func TestValidSpecsPass(t *testing.T) {
	docs := readCases(t, "../testdata/admission/valid.yaml")
	if len(docs) < 10 {
		t.Fatalf("%d valid cases, want at least 10", len(docs))
	}
	for _, d := range append(docs, readCases(t, "../testdata/examples")...) {
		if _, ok := kindSchemas[d.Object.GetKind()]; !ok {
			continue
		}
		if err := Validate(d.Object); err != nil {
			t.Errorf("%s: %v", d.Where(), err)
		}
	}
}
