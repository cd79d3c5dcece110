package engine_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/reconcile/engine"
)

// TestStampChild holds the child contract to whole values: a bare child gets the managed-by
// label, its owner's shard bucket, the owner as controller and the hash of all that; what else
// it carries stays; a stale hash or controller is replaced; stamping twice changes nothing.
func TestStampChild(t *testing.T) {
	owner := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toys.example.com/v1", "kind": "Greeting",
		"metadata": map[string]any{"name": "hello", "namespace": "default", "uid": "6f1c9d1e-0b5a-4c1e-9a3e-2b7d8f0c1a2b"},
	}}
	controller := map[string]any{"apiVersion": "toys.example.com/v1", "kind": "Greeting", "name": "hello",
		"uid": "6f1c9d1e-0b5a-4c1e-9a3e-2b7d8f0c1a2b", "controller": true, "blockOwnerDeletion": true}
	other := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "keeper", "uid": "u-2"}
	for name, tc := range map[string]struct {
		meta, want map[string]any
	}{
		"a bare child": {
			meta: map[string]any{"name": "hello-greeting", "namespace": "default"},
			want: map[string]any{"name": "hello-greeting", "namespace": "default",
				"labels":          map[string]any{"app.kubernetes.io/managed-by": "evalsi", "evals.si/shard-bucket": "35"},
				"ownerReferences": []any{controller},
				"annotations":     map[string]any{"evals.si/spec-hash": "e580346c1235a9f7"}},
		},
		"a child with labels, annotations and another owner of its own": {
			meta: map[string]any{"name": "hello-greeting", "namespace": "default",
				"labels":          map[string]any{"team": "a"},
				"annotations":     map[string]any{"note": "kept", "evals.si/spec-hash": "stale"},
				"ownerReferences": []any{other, map[string]any{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u-3", "controller": true}}},
			want: map[string]any{"name": "hello-greeting", "namespace": "default",
				"labels":          map[string]any{"team": "a", "app.kubernetes.io/managed-by": "evalsi", "evals.si/shard-bucket": "35"},
				"ownerReferences": []any{controller, other},
				"annotations":     map[string]any{"note": "kept", "evals.si/spec-hash": "18a5f4134300d764"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			child := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": tc.meta, "data": map[string]any{"text": "hi"}}}
			if err := engine.StampChild(owner, child); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, child.Object["metadata"]); diff != "" {
				t.Errorf("stamped metadata (-want +got):\n%s", diff)
			}
			again := child.DeepCopy()
			if err := engine.StampChild(owner, again); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(child.Object, again.Object); diff != "" {
				t.Errorf("stamped twice (-once +twice):\n%s", diff)
			}
		})
	}
}
