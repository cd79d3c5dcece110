package engine

import (
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Each resource has its own budget: a Deployment apply does not wait behind status writes or
// Events; a status write shares its resource's budget; the client keeps no limit of its own.
func TestRateLimitIsPerResource(t *testing.T) {
	rc := &rest.Config{QPS: 200, Burst: 400}
	limitPerResource(rc)
	if rc.QPS >= 0 || rc.RateLimiter != nil {
		t.Errorf("the client keeps a limit of its own: QPS %v", rc.QPS)
	}
	l := &resourceLimits{qps: 0.001, burst: 1, by: map[string]flowcontrol.RateLimiter{}}
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/apis/apps/v1/namespaces/a/deployments/x", true},
		{"/apis/apps/v1/namespaces/a/deployments/y", false}, // the Deployments' budget is spent
		{"/apis/evals.si/v1alpha1/namespaces/a/evaluators/x/status", true},
		{"/apis/evals.si/v1alpha1/namespaces/a/evaluators/x", false}, // a status write counts against its resource
		{"/api/v1/namespaces/a/events", true},
		{"/apis/keda.sh/v1alpha1/namespaces/a/scaledobjects/x", true},
	} {
		if got := l.limiter(budgetOf(tc.path)).TryAccept(); got != tc.want {
			t.Errorf("%s: admitted %v, want %v", tc.path, got, tc.want)
		}
	}
}
