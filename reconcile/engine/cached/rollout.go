package cached

import (
	"fmt"
	"strings"
)

// Rollout is how far a Deployment has rolled out its current spec.
type Rollout struct {
	Done     bool
	Message  string // why it is not done
	Replicas int64  // pods of the Deployment
	Ready    int64  // ready pods
}

// RolloutOf reads a Deployment's rollout from its status: done when the Deployment controller has
// seen the current generation, every desired replica runs the current template, no old pod is
// left and the updated ones are available. A nil Deployment is not rolled out. While it is not
// done and the API server refuses its pods, the message says why.
func RolloutOf(d *Child) Rollout {
	if d == nil {
		return Rollout{Message: "waiting for the Deployment to be created"}
	}
	var st rolloutCounts
	want := int64(1) // spec.replicas left to an autoscaler defaults to 1
	if d.deployment != nil {
		st = d.deployment.status
		if d.deployment.replicas != nil {
			want = *d.deployment.replicas
		}
	}
	r := Rollout{Replicas: st.Replicas, Ready: st.ReadyReplicas}
	updated, available := st.UpdatedReplicas, st.AvailableReplicas
	switch {
	case st.ObservedGeneration < d.Generation:
		r.Message = fmt.Sprintf("waiting for Deployment %s to observe its new spec", d.Name)
	case updated < want:
		r.Message = fmt.Sprintf("Deployment %s: %d of %d replicas run the current spec", d.Name, updated, want)
	case r.Replicas > updated:
		r.Message = fmt.Sprintf("Deployment %s: %d old replicas are terminating", d.Name, r.Replicas-updated)
	case available < updated:
		r.Message = fmt.Sprintf("Deployment %s: %d of %d replicas are available", d.Name, available, updated)
	default:
		r.Done = true
	}
	if !r.Done && st.PodsRefused != "" {
		r.Message = fmt.Sprintf("Deployment %s cannot create its pods: %s", d.Name, withoutPodName(st.PodsRefused))
	}
	return r
}

// withoutPodName is the API server's refusal of a pod without the pod's name, which the
// ReplicaSet draws anew at each try: the condition's message stays the same while the cause does.
func withoutPodName(refusal string) string {
	if _, reason, ok := strings.Cut(refusal, `" is forbidden: `); ok && strings.HasPrefix(refusal, `pods "`) {
		return reason
	}
	return refusal
}
