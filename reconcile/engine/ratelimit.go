package engine

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// resourceLimits give each resource its own client-side budget of requests (a token bucket of
// qps with burst), as controller-runtime gives each resource type its own client: applying
// Deployments does not wait behind the status writes, ScaledObjects or Events of the same
// reconciles. A status write counts against its resource's budget. The API server's priority and
// fairness still bounds the operator as a whole.
type resourceLimits struct {
	qps   float32
	burst int
	mu    sync.Mutex
	by    map[string]flowcontrol.RateLimiter
}

// limitPerResource moves rc's rate limit (QPS and Burst, client-go's defaults when QPS is 0) from
// the client to one budget per resource; a negative QPS stays without limit.
func limitPerResource(rc *rest.Config) {
	qps, burst := rc.QPS, rc.Burst
	if qps == 0 {
		qps, burst = rest.DefaultQPS, rest.DefaultBurst
	}
	rc.QPS, rc.Burst, rc.RateLimiter = -1, 0, nil
	if qps < 0 {
		return
	}
	l := &resourceLimits{qps: qps, burst: burst, by: map[string]flowcontrol.RateLimiter{}}
	rc.Wrap(l.wrap)
}

func (l *resourceLimits) limiter(resource string) flowcontrol.RateLimiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.by[resource]
	if !ok {
		r = flowcontrol.NewTokenBucketRateLimiter(l.qps, l.burst)
		l.by[resource] = r
	}
	return r
}

// budgetOf names the budget of a request path: its resource, a subresource counting as its resource.
func budgetOf(path string) string {
	resource, _, _ := strings.Cut(resourceOf(path), "/")
	return resource
}

func (l *resourceLimits) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if err := l.limiter(budgetOf(req.URL.Path)).Wait(req.Context()); err != nil {
			return nil, err
		}
		return rt.RoundTrip(req)
	})
}
