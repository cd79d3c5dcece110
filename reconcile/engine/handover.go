package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// handoverManager briefly owns a field the operator stops applying (Kind.Handover), so that
// dropping the field from the operator's apply does not reset it. Clusters' managed fields name
// it, from when a Deployment's replicas were the one such field.
const handoverManager = "evalsi-operator-replicas-handover"

// handOver keeps the value of want's field at path when the operator stops applying it: if the
// operator's apply owns the field in the live object (of resource gvr), a manager of its own
// applies the same value first, so that the field stays owned and the operator's apply without
// it does not reset it to its default (a Deployment's replicas to 1).
func (c *Controller) handOver(ctx context.Context, gvr schema.GroupVersionResource, want *unstructured.Unstructured, path []string) error {
	client := c.client.Resource(gvr).Namespace(want.GetNamespace())
	what := fmt.Sprintf("%s %s/%s", want.GetKind(), want.GetNamespace(), want.GetName())
	cur, err := client.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", what, err)
	}
	owns, err := appliesField(cur, path)
	if err != nil || !owns {
		return err
	}
	value, found, err := unstructured.NestedFieldCopy(cur.Object, path...)
	if err != nil || !found {
		return err
	}
	handover := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": want.GetAPIVersion(), "kind": want.GetKind(),
		"metadata": map[string]any{"name": want.GetName(), "namespace": want.GetNamespace()},
	}}
	if err := unstructured.SetNestedField(handover.Object, value, path...); err != nil {
		return fmt.Errorf("handing over %s of %s: %w", strings.Join(path, "."), what, err)
	}
	if _, err := client.Apply(ctx, want.GetName(), handover, metav1.ApplyOptions{FieldManager: handoverManager, Force: true}); err != nil {
		return fmt.Errorf("handing over %s of %s: %w", strings.Join(path, "."), what, err)
	}
	return nil
}

// appliesField reports whether the operator's apply owns the field at path of obj, read from
// obj's managed fields (the main resource's, not a subresource's).
func appliesField(obj *unstructured.Unstructured, path []string) (bool, error) {
	for _, m := range obj.GetManagedFields() {
		if m.Manager != FieldManager || m.Operation != metav1.ManagedFieldsOperationApply || m.Subresource != "" || m.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(m.FieldsV1.Raw, &fields); err != nil {
			return false, fmt.Errorf("reading the fields the operator owns in %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		for _, name := range path {
			if fields, _ = fields["f:"+name].(map[string]any); fields == nil {
				return false, nil
			}
		}
		return true, nil
	}
	return false, nil
}
