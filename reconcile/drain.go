package reconcile

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
