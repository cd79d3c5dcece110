package reconcile

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func deploymentWith(generation int64, replicas any, status map[string]any) *unstructured.Unstructured {
	spec := map[string]any{}
	if replicas != nil {
		spec["replicas"] = replicas
	}
	d := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "d", "generation": generation},
		"spec":     spec,
		"status":   status,
	}}
	return d
}

func TestRolloutOf(t *testing.T) {
	for name, tc := range map[string]struct {
		d    *unstructured.Unstructured
		done bool
	}{
		"no deployment yet": {nil, false},
		"new spec not yet observed": {deploymentWith(2, int64(1), map[string]any{
			"observedGeneration": int64(1), "replicas": int64(1), "updatedReplicas": int64(1), "readyReplicas": int64(1), "availableReplicas": int64(1),
		}), false},
		"old revision's replica still serving": {deploymentWith(2, int64(1), map[string]any{
			"observedGeneration": int64(2), "replicas": int64(1), "updatedReplicas": int64(0), "readyReplicas": int64(1), "availableReplicas": int64(1),
		}), false},
		"old replicas terminating": {deploymentWith(2, int64(1), map[string]any{
			"observedGeneration": int64(2), "replicas": int64(2), "updatedReplicas": int64(1), "readyReplicas": int64(1), "availableReplicas": int64(1),
		}), false},
		"new replica not yet available": {deploymentWith(2, int64(1), map[string]any{
			"observedGeneration": int64(2), "replicas": int64(1), "updatedReplicas": int64(1), "availableReplicas": int64(0),
		}), false},
		"rolled out": {deploymentWith(2, int64(2), map[string]any{
			"observedGeneration": int64(2), "replicas": int64(2), "updatedReplicas": int64(2), "readyReplicas": int64(2), "availableReplicas": int64(2),
		}), true},
		"replicas left to the HPA default to 1": {deploymentWith(1, nil, map[string]any{
			"observedGeneration": int64(1), "replicas": int64(1), "updatedReplicas": int64(1), "readyReplicas": int64(1), "availableReplicas": int64(1),
		}), true},
	} {
		t.Run(name, func(t *testing.T) {
			r := rolloutOf(tc.d)
			if r.done != tc.done {
				t.Errorf("done = %v (%s), want %v", r.done, r.message, tc.done)
			}
			if !r.done && r.message == "" {
				t.Error("not done without a message")
			}
		})
	}
}
