package schemas

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestUnknownFieldNames: each unknown field is named once, whatever its name holds, in the
// same order every time (the validator lists them in map order, escaping quotes).
func TestUnknownFieldNames(t *testing.T) {
	cases := map[string]struct {
		keys []string
		want []string
	}{
		"plain":                  {[]string{"replicaz"}, []string{"/spec/autoscaling/replicaz"}},
		"a quote":                {[]string{"'0", "'00"}, []string{"/spec/autoscaling/'0", "/spec/autoscaling/'00"}},
		"quotes and commas":      {[]string{"a', 'b", "b"}, []string{"/spec/autoscaling/a', 'b", "/spec/autoscaling/b"}},
		"a backslash at the end": {[]string{`x\`, `x\'`}, []string{`/spec/autoscaling/x\`, `/spec/autoscaling/x\'`}},
		"a double quote":         {[]string{`"q"`}, []string{`/spec/autoscaling/"q"`}},
		"a slash and a tilde":    {[]string{"a/b~"}, []string{"/spec/autoscaling/a~1b~0"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			for range 20 {
				scaling := map[string]any{"maxReplicas": int64(2)}
				for _, k := range c.keys {
					scaling[k] = int64(1)
				}
				err := Validate(&unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
					"metadata": map[string]any{"name": "e", "namespace": "ns"},
					"spec":     map[string]any{"image": "registry.example/e:1", "autoscaling": scaling},
				}})
				errs, _ := err.(Errors)
				var got []string
				for _, e := range errs {
					if e.Message != "is not a known field" {
						t.Fatalf("unexpected error %s", e)
					}
					got = append(got, e.Pointer)
				}
				if diff := cmp.Diff(c.want, got); diff != "" {
					t.Fatalf("unknown fields (-want +got):\n%s", diff)
				}
			}
		})
	}
}
