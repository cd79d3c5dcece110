package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// setFinalizer adds or removes finalizer on obj with a JSON patch that tests the current list
// first, so that it neither loses another controller's finalizer nor conflicts on an unrelated
// change. obj is updated to the patched object.
func (e *Engine) setFinalizer(ctx context.Context, k *kind, obj *unstructured.Unstructured, finalizer string, present bool) error {
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
	got, err := e.client.Resource(k.gvr).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
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

// stillHeld reads obj afresh and reports whether it still carries finalizer: after the operator
// released it, the cache may still show the object held, and acting on that would repeat the
// release's calls to evalsid. obj is updated to what was read.
func (e *Engine) stillHeld(ctx context.Context, k *kind, obj *unstructured.Unstructured, finalizer string) (bool, error) {
	fresh, err := e.client.Resource(k.gvr).Namespace(obj.GetNamespace()).Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s %s: %w", k.name, obj.GetName(), err)
	}
	obj.Object = fresh.Object
	return slices.Contains(obj.GetFinalizers(), finalizer), nil
}

// ReleaseFinalizers removes the operator's finalizers from every object of the selected kinds,
// so that nothing waits on an operator that is being uninstalled: the objects stay, their runs
// and policies stay on the server, and deleting them later completes at once. It returns how
// many objects it released.
func (e *Engine) ReleaseFinalizers(ctx context.Context) (int, error) {
	released := 0
	for _, k := range e.wanted() {
		if k.finalizer == "" {
			continue
		}
		list, err := e.client.Resource(k.gvr).Namespace(e.cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return released, fmt.Errorf("listing %s: %w", k.gvr.Resource, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if !slices.Contains(obj.GetFinalizers(), k.finalizer) {
				continue
			}
			if err := e.setFinalizer(ctx, k, obj, k.finalizer, false); err != nil {
				return released, fmt.Errorf("%s %s/%s: %w", k.name, obj.GetNamespace(), obj.GetName(), err)
			}
			released++
		}
	}
	return released, nil
}
