package engine

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A field is handed over only when the operator's apply owns it in the main resource.
func TestAppliesField(t *testing.T) {
	replicas := `{"f:spec":{"f:replicas":{},"f:template":{}}}`
	for name, tc := range map[string]struct {
		manager, subresource string
		operation            metav1.ManagedFieldsOperationType
		fields               string
		want                 bool
	}{
		"the operator's apply owns it":        {FieldManager, "", metav1.ManagedFieldsOperationApply, replicas, true},
		"another manager owns it":             {"kube-controller-manager", "", metav1.ManagedFieldsOperationApply, replicas, false},
		"the operator's update, no apply":     {FieldManager, "", metav1.ManagedFieldsOperationUpdate, replicas, false},
		"owned through the scale subresource": {FieldManager, "scale", metav1.ManagedFieldsOperationApply, replicas, false},
		"the operator's apply without it":     {FieldManager, "", metav1.ManagedFieldsOperationApply, `{"f:spec":{"f:template":{}}}`, false},
	} {
		t.Run(name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{}}
			obj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: tc.manager, Operation: tc.operation, Subresource: tc.subresource,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(tc.fields)}}})
			got, err := appliesField(obj, []string{"spec", "replicas"})
			if err != nil || got != tc.want {
				t.Errorf("appliesField = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
