package cached

import (
	"testing"
	"unique"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The drift check holds a rendering to the fields the operator's apply owns, read from its
// managed-fields entry (FieldsV1), with lists matched by key, value or index.
func TestUnownedFields(t *testing.T) {
	owned := `{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:name":{}}},` +
		`"f:finalizers":{"v:\"a\"":{}},"f:selector":{},"f:triggers":{}}}`
	for name, tc := range map[string]struct {
		spec map[string]any
		want string
	}{
		"every field owned": {
			spec: map[string]any{"ports": []any{map[string]any{"port": int64(80), "name": "http"}}, "selector": map[string]any{"x": "y"}},
		},
		"a key field the API server defaulted is not in the rendering": {
			spec: map[string]any{"ports": []any{map[string]any{"port": int64(80)}}},
		},
		"an atomic list is owned whole": {
			spec: map[string]any{"triggers": []any{map[string]any{"type": "metrics-api", "metadata": map[string]any{"a": "b"}}}},
		},
		"a set element by value": {
			spec: map[string]any{"finalizers": []any{"a"}},
		},
		"empty values are not compared": {
			spec: map[string]any{"args": []any{}, "env": map[string]any{}},
		},
		"a list element another writer changed": {
			spec: map[string]any{"ports": []any{map[string]any{"port": int64(81)}}},
			want: ".spec.ports[0]",
		},
		"a field another writer took": {
			spec: map[string]any{"replicas": int64(3)},
			want: ".spec.replicas",
		},
		"a field inside a list element": {
			spec: map[string]any{"ports": []any{map[string]any{"port": int64(80), "targetPort": int64(8080)}}},
			want: ".spec.ports[0].targetPort",
		},
		"a set element not owned": {
			spec: map[string]any{"finalizers": []any{"b"}},
			want: ".spec.finalizers[0]",
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := &Child{owned: unique.Make(owned)}
			want := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "Thing",
				"metadata": map[string]any{"name": "n", "namespace": "ns", "labels": map[string]any{"app": "a"}},
				"spec":     tc.spec,
			}}
			if got := c.Unowned(want); got != tc.want {
				t.Errorf("unowned = %q, want %q", got, tc.want)
			}
		})
	}
	if got := (&Child{}).Unowned(&unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"a": "b"}}}); got == "" {
		t.Error("a child the operator never applied is not drifted")
	}
}
