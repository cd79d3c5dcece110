package reconcile

import "fmt"

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
func rolloutOf(d *cachedChild) rollout {
	if d == nil {
		return rollout{message: "waiting for the Deployment to be created"}
	}
	var st rolloutCounts
	if d.rollout != nil {
		st = *d.rollout
	}
	want := int64(1) // spec.replicas left to an autoscaler defaults to 1
	if d.replicas != nil {
		want = *d.replicas
	}
	r := rollout{replicas: st.Replicas, ready: st.ReadyReplicas}
	updated, available := st.UpdatedReplicas, st.AvailableReplicas
	switch {
	case st.ObservedGeneration < d.Generation:
		r.message = fmt.Sprintf("waiting for Deployment %s to observe its new spec", d.Name)
	case updated < want:
		r.message = fmt.Sprintf("Deployment %s: %d of %d replicas run the current spec", d.Name, updated, want)
	case r.replicas > updated:
		r.message = fmt.Sprintf("Deployment %s: %d old replicas are terminating", d.Name, r.replicas-updated)
	case available < updated:
		r.message = fmt.Sprintf("Deployment %s: %d of %d replicas are available", d.Name, available, updated)
	default:
		r.done = true
	}
	return r
}
