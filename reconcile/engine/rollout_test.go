package engine

import "testing"

// deploymentWith is a cached Deployment of generation with spec.replicas (nil: unset) and status.
func deploymentWith(generation int64, replicas *int64, status rolloutCounts) *Child {
	return &Child{cachedMeta: cachedMeta{Name: "d", Generation: generation}, deployment: &deployment{replicas: replicas, status: status}}
}

func TestRolloutOf(t *testing.T) {
	for name, tc := range map[string]struct {
		d    *Child
		done bool
	}{
		"no deployment yet":                     {nil, false},
		"new spec not yet observed":             {deploymentWith(2, new(int64(1)), rolloutCounts{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}), false},
		"old revision's replica still serving":  {deploymentWith(2, new(int64(1)), rolloutCounts{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 0, ReadyReplicas: 1, AvailableReplicas: 1}), false},
		"old replicas terminating":              {deploymentWith(2, new(int64(1)), rolloutCounts{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}), false},
		"new replica not yet available":         {deploymentWith(2, new(int64(1)), rolloutCounts{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 0}), false},
		"rolled out":                            {deploymentWith(2, new(int64(2)), rolloutCounts{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}), true},
		"replicas left to the HPA default to 1": {deploymentWith(1, nil, rolloutCounts{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}), true},
	} {
		t.Run(name, func(t *testing.T) {
			r := RolloutOf(tc.d)
			if r.Done != tc.done {
				t.Errorf("done = %v (%s), want %v", r.Done, r.Message, tc.done)
			}
			if !r.Done && r.Message == "" {
				t.Error("not done without a message")
			}
		})
	}
}
