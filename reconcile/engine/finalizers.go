package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// patchFinalizer adds or removes finalizer on obj, an object of resource, with a JSON patch that
// tests the current list first, so that it neither loses another controller's finalizer nor
// conflicts on an unrelated change. obj is updated to the patched object.
func (s *services) patchFinalizer(ctx context.Context, resource schema.GroupVersionResource, obj *unstructured.Unstructured, finalizer string, present bool) error {
	cur := obj.GetFinalizers()
	if slices.Contains(cur, finalizer) == present {
		return nil
	}
	next := slices.DeleteFunc(slices.Clone(cur), func(f string) bool { return f == finalizer })
	if present {
		next = append(next, finalizer)
	}
	var ops []map[string]any
	if cur == nil {
		ops = []map[string]any{{"op": "add", "path": "/metadata/finalizers", "value": next}}
	} else {
		ops = []map[string]any{
			{"op": "test", "path": "/metadata/finalizers", "value": cur},
			{"op": "replace", "path": "/metadata/finalizers", "value": next},
		}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	got, err := s.client.Resource(resource).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		verb := "removing"
		if present {
			verb = "adding"
		}
		return fmt.Errorf("%s finalizer %s: %w", verb, finalizer, err)
	}
	obj.Object = got.Object
	return nil
}
