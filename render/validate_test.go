package render

import (
	"errors"
	"os"
	"testing"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/schemas"
)

// expectAnnotation on a test case holds the error that validation must give first.
const expectAnnotation = "test.evals.si/expect"

func readCases(t *testing.T, path string) []manifest.Document {
	t.Helper()
	docs, err := manifest.Read(path, os.Stdin)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// TestInvalidSpecsNameTheField runs the invalid admission cases through Validate and through
// rendering with the golden options: both refuse each case, first with the expected field and
// sentence, and with the same errors.
func TestInvalidSpecsNameTheField(t *testing.T) {
	docs := readCases(t, "../testdata/admission/invalid.yaml")
	if len(docs) < 90 {
		t.Fatalf("%d invalid cases, want at least 90", len(docs))
	}
	for _, d := range docs {
		t.Run(d.Object.GetKind()+"/"+d.Object.GetName(), func(t *testing.T) {
			want := d.Object.GetAnnotations()[expectAnnotation]
			err := Validate(d.Object, goldenOptions.Limits)
			var errs schemas.Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("Validate = %v, want %q", err, want)
			}
			if errs[0].String() != want {
				t.Errorf("first error %q, want %q (all: %v)", errs[0].String(), want, errs)
			}
			_, rerr := Object(d.Object, goldenOptions)
			if rerr == nil || rerr.Error() != err.Error() {
				t.Errorf("rendering says %v, validation %v", rerr, err)
			}
		})
	}
}

// TestValidSpecsRender checks that every valid admission case and example passes Validate and
// renders with the golden options.
func TestValidSpecsRender(t *testing.T) {
	docs := readCases(t, "../testdata/admission/valid.yaml")
	if len(docs) < 20 {
		t.Fatalf("%d valid cases, want at least 20", len(docs))
	}
	for _, d := range append(docs, readCases(t, "../testdata/examples")...) {
		if d.Object.GroupVersionKind().Group != evalsi.Group {
			continue
		}
		if err := Validate(d.Object, goldenOptions.Limits); err != nil {
			t.Errorf("%s: %v", d.Where(), err)
		}
		if _, err := Object(d.Object, goldenOptions); err != nil {
			t.Errorf("%s: rendering: %v", d.Where(), err)
		}
	}
}
