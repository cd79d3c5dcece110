package crdschema

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/golden"
)

// TestGoldenCRDsDescribeTheSpecs holds the CRDs of chart evalsi-crds to the kinds' JSON schemas
// and the protos' comments: each CRD's spec schema is what Spec writes (`make golden` rewrites
// them), so a field added to a schema without a description, or described twice, fails here.
func TestGoldenCRDsDescribeTheSpecs(t *testing.T) {
	src, err := Read("../../apiclient/proto/evalsi/v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range evalsi.Kinds {
		t.Run(k.Kind, func(t *testing.T) {
			spec, err := src.Spec(k.Kind)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("../../chart/evalsi-crds/files/crds", k.Resource.Resource+".yaml")
			crd, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Rewrite(crd, spec)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, path, out)
		})
	}
}

// TestEveryPropertyHasOneDescription refuses a property described in neither place, and one
// described in both.
func TestEveryPropertyHasOneDescription(t *testing.T) {
	protos := map[string]message{"RunSpec": {"suite": {typ: "string", comment: "The suite."}}}
	for name, tc := range map[string]struct {
		schema string
		want   string
	}{
		"described in neither": {`{"type": "object", "properties": {"image": {"type": "string"}}}`, "spec.image has no description"},
		"described in both": {`{"type": "object", "properties": {"suite": {"type": "string", "description": "A suite."}}}`,
			"spec.suite is described twice"},
		"a definition's description serves": {`{"type": "object", "properties": {"image": {"$ref": "#/$defs/image"}}, "$defs": {"image": {"type": "string", "description": "An image."}}}`, ""},
	} {
		t.Run(name, func(t *testing.T) {
			src := &Source{schemas: map[string]map[string]any{}, protos: protos}
			var doc map[string]any
			if err := jsonUnmarshal(tc.schema, &doc); err != nil {
				t.Fatal(err)
			}
			src.schemas["evalrun.json"] = doc
			_, err := src.Spec("EvalRun")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
