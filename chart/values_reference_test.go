package chart_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"evals.si/operator/internal/golden"
	"evals.si/operator/internal/valuesdoc"
)

// TestGoldenValuesReference: docs/values.md is the three charts' values as their values.yaml
// gives them (path, default, the comment above it), written again by `make golden`; a value added
// without updating it, or a default changed, fails here. Every top-level value has a description.
func TestGoldenValuesReference(t *testing.T) {
	var doc bytes.Buffer
	doc.WriteString("# Values reference\n\nGenerated from each chart's values.yaml (`make golden`; `chart/TestGoldenValuesReference` fails when it is stale). The values a production cluster decides are in docs/install.md.\n\n")
	for _, chart := range []string{"evalsi-crds", "evalsi", "evalsi-sandboxd"} {
		data, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		values, err := valuesdoc.Read(data)
		if err != nil {
			t.Fatalf("%s/values.yaml: %v", chart, err)
		}
		described := map[string]bool{}
		for _, v := range values {
			top, _, _ := cutDot(v.Path)
			if v.Description != "" {
				described[top] = true
			} else if _, seen := described[top]; !seen {
				described[top] = false
			}
		}
		for top, ok := range described {
			if !ok {
				t.Errorf("%s/values.yaml: %s has no description (a comment above it)", chart, top)
			}
		}
		valuesdoc.Write(&doc, chart, values)
	}
	golden.Check(t, filepath.Join("..", "docs", "values.md"), doc.Bytes())
}

// cutDot splits a dotted path at its first dot.
func cutDot(path string) (string, string, bool) {
	for i := range path {
		if path[i] == '.' {
			return path[:i], path[i+1:], true
		}
	}
	return path, "", false
}
