package cached

import (
	"strings"
	"testing"
)

// deploymentWith is a cached Deployment of generation with spec.replicas (nil: unset) and status.
func deploymentWith(generation int64, replicas *int64, status rolloutCounts) *Child {
	return &Child{cachedMeta: cachedMeta{Name: "d", Generation: generation}, deployment: &deployment{replicas: replicas, status: status}}
}

func TestRolloutOf(t *testing.T) {
	refused := rolloutCounts{ObservedGeneration: 2, PodsRefused: `pods "d-7c9d" is forbidden: violates PodSecurity "restricted:latest"`}
	for name, tc := range map[string]struct {
		d    *Child
		done bool
		want string // in the message, when set
	}{
		"pods refused":                          {d: deploymentWith(2, new(int64(1)), refused), want: `Deployment d cannot create its pods: violates PodSecurity "restricted:latest"`},
		"no deployment yet":                     {d: nil, done: false},
		"new spec not yet observed":             {d: deploymentWith(2, new(int64(1)), rolloutCounts{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}), done: false},
		"old revision's replica still serving":  {d: deploymentWith(2, new(int64(1)), rolloutCounts{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 0, ReadyReplicas: 1, AvailableReplicas: 1}), done: false},
		"old replicas terminating":              {d: deploymentWith(2, new(int64(1)), rolloutCounts{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}), done: false},
		"new replica not yet available":         {d: deploymentWith(2, new(int64(1)), rolloutCounts{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 0}), done: false},
		"rolled out":                            {d: deploymentWith(2, new(int64(2)), rolloutCounts{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}), done: true},
		"replicas left to the HPA default to 1": {d: deploymentWith(1, nil, rolloutCounts{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}), done: true},
	} {
		t.Run(name, func(t *testing.T) {
			r := RolloutOf(tc.d)
			if r.Done != tc.done {
				t.Errorf("done = %v (%s), want %v", r.Done, r.Message, tc.done)
			}
			if !r.Done && r.Message == "" {
				t.Error("not done without a message")
			}
			if !strings.Contains(r.Message, tc.want) {
				t.Errorf("message %q, want it to say %q", r.Message, tc.want)
			}
		})
	}
}
