package reconcile

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// rollout is how far a Deployment has rolled out its current spec.
type rollout struct {
	done     bool
	message  string
	replicas int64 // pods of the Deployment
	ready    int64 // ready pods
}

// rolloutOf reads a Deployment's rollout from its status: done when the Deployment controller has
// seen the current generation, every desired replica runs the current template, no old pod is
// left and the updated ones are available. A nil Deployment is not rolled out.
func rolloutOf(d *unstructured.Unstructured) rollout {
	if d == nil {
		return rollout{message: "waiting for the Deployment to be created"}
	}
	status := func(f string) int64 {
		v, _, _ := unstructured.NestedInt64(d.Object, "status", f)
		return v
	}
	want := int64(1)
	if v, found, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); found {
		want = v
	}
	r := rollout{replicas: status("replicas"), ready: status("readyReplicas")}
	updated, available := status("updatedReplicas"), status("availableReplicas")
	switch {
	case status("observedGeneration") < d.GetGeneration():
		r.message = fmt.Sprintf("waiting for Deployment %s to observe its new spec", d.GetName())
	case updated < want:
		r.message = fmt.Sprintf("Deployment %s: %d of %d replicas run the current spec", d.GetName(), updated, want)
	case r.replicas > updated:
		r.message = fmt.Sprintf("Deployment %s: %d old replicas are terminating", d.GetName(), r.replicas-updated)
	case available < updated:
		r.message = fmt.Sprintf("Deployment %s: %d of %d replicas are available", d.GetName(), available, updated)
	default:
		r.done = true
	}
	return r
}
