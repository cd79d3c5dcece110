package cached

import (
	"encoding/json"
	"fmt"
	"testing"
	"unique"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/internal/manifest"
)

// The controller owner's UID in an interned field set stands for the owner of the child it is
// read for: the child's own owner reference is owned, another UID is not.
func TestUnownedOwnerReference(t *testing.T) {
	owned := `{"f:metadata":{"f:ownerReferences":{"k:{\"uid\":\"` + ownerPlaceholder + `\"}":{}}}}`
	for name, tc := range map[string]struct {
		refUID string
		want   string
	}{
		"the child's owner":   {refUID: "u-1"},
		"another owner's UID": {refUID: "u-2", want: ".metadata.ownerReferences[0]"},
	} {
		t.Run(name, func(t *testing.T) {
			c := &Child{owned: unique.Make(owned), controller: unique.Make(ControllerRef{Kind: "Evaluator", Name: "e", UID: "u-1"})}
			want := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{
				"ownerReferences": []any{map[string]any{"kind": "Evaluator", "name": "e", "uid": tc.refUID}},
			}}}
			if got := c.Unowned(want); got != tc.want {
				t.Errorf("unowned = %q, want %q", got, tc.want)
			}
		})
	}
}

// A field set that does not parse is not trusted: every field reads as unowned.
func TestParseFieldSetErrors(t *testing.T) {
	for name, raw := range map[string]string{
		"not JSON":       `{"f:spec"`,
		"an index":       `{"i:x":{}}`,
		"a key not JSON": `{"k:{\"name\"":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseFieldSet(raw); err == nil {
				t.Errorf("parseFieldSet(%s) = nil error", raw)
			}
			c := &Child{owned: unique.Make(raw)}
			if got := c.Unowned(&unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"a": "b"}}}); got != "." {
				t.Errorf("unowned = %q, want %q", got, ".")
			}
		})
	}
}

// BenchmarkUnowned is the drift check of an autoscaled Evaluator's rendered children against the
// fields an apply of each owns.
func BenchmarkUnowned(b *testing.B) {
	docs, err := manifest.Read("../../testdata/render/evaluator/autoscaling/output.yaml", nil)
	if err != nil {
		b.Fatal(err)
	}
	var children []*Child
	var wants []*unstructured.Unstructured
	for _, d := range docs {
		raw, err := json.Marshal(appliedFields(d.Object.Object))
		if err != nil {
			b.Fatal(err)
		}
		children = append(children, &Child{owned: unique.Make(string(raw))})
		wants = append(wants, d.Object)
	}
	for b.Loop() {
		for i, c := range children {
			if p := c.Unowned(wants[i]); p != "" {
				b.Fatalf("%s: unowned at %s", wants[i].GetKind(), p)
			}
		}
	}
}

// appliedFields is about the field set an apply of v owns: list elements by their name, uid or
// port when they have one, else by index.
func appliedFields(v any) map[string]any {
	fs := map[string]any{}
	switch w := v.(type) {
	case map[string]any:
		for k, sub := range w {
			fs["f:"+k] = appliedFields(sub)
		}
	case []any:
		for i, el := range w {
			m, ok := el.(map[string]any)
			if !ok {
				raw, _ := json.Marshal(el)
				fs["v:"+string(raw)] = map[string]any{}
				continue
			}
			key := fmt.Sprintf("i:%d", i)
			for _, f := range []string{"name", "uid", "containerPort", "port"} {
				if kv, ok := m[f]; ok {
					raw, _ := json.Marshal(map[string]any{f: kv})
					key = "k:" + string(raw)
					break
				}
			}
			sub := appliedFields(el)
			sub["."] = map[string]any{}
			fs[key] = sub
		}
	}
	return fs
}

// The parsed field sets are bounded: past maxParsedFieldSets distinct shapes the cache starts
// over, and its count is of the entries it holds.
func TestParsedFieldSetsBounded(t *testing.T) {
	shape := func(i int) unique.Handle[string] { return unique.Make(fmt.Sprintf(`{"f:spec":{"f:field%d":{}}}`, i)) }
	for i := range maxParsedFieldSets + 10 {
		if _, err := parsedFieldSet(shape(i)); err != nil {
			t.Fatal(err)
		}
		if n := parsedFieldSets.n.Load(); n > maxParsedFieldSets {
			t.Fatalf("after %d shapes, %d kept", i+1, n)
		}
	}
	kept := 0
	parsedFieldSets.Range(func(any, any) bool { kept++; return true })
	if int64(kept) != parsedFieldSets.n.Load() {
		t.Errorf("%d entries, counted %d", kept, parsedFieldSets.n.Load())
	}
	if kept == 0 || kept > maxParsedFieldSets {
		t.Errorf("%d entries kept, want 1 to %d", kept, maxParsedFieldSets)
	}
}
