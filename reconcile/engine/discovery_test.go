package engine_test

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"evals.si/operator/reconcile/engine/cached"
)

// Three engines of one process (three shards held) look at the real API server's discovery
// through one Discovery: while its answers are kept, the server is asked once for its version and
// once for a group-version, however many engines ask; keeping none, every look is a request.
func TestDiscoveryAsksOnceWhileFresh(t *testing.T) {
	cfg := rest.CopyConfig(shared.Get(t).Config)
	var asked atomic.Int32
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			if r.URL.Path == "/version" || strings.HasPrefix(r.URL.Path, "/apis/apps/v1") {
				asked.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	client, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		fresh time.Duration
		want  int32
	}{
		"answers kept for a minute": {time.Minute, 2},
		"answers kept for none":     {0, 3 * 2 * 2},
	} {
		t.Run(name, func(t *testing.T) {
			asked.Store(0)
			d := cached.NewDiscovery(client, tc.fresh)
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					for range 2 {
						if _, err := d.ServerVersion(); err != nil {
							t.Error(err)
						}
						list, err := d.ServerResourcesForGroupVersion("apps/v1")
						if err != nil || !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "deployments" }) {
							t.Errorf("apps/v1: %v, deployments not served", err)
						}
					}
				})
			}
			wg.Wait()
			if got := asked.Load(); got != tc.want {
				t.Errorf("the API server was asked %d times, want %d", got, tc.want)
			}
		})
	}
}

// roundTrip is an http.RoundTripper of one function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
