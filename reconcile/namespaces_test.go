package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/shard"
)

// The engines of a replica's shards read the namespaces' bindings through one reader, started
// with the first engine and stopped after the last, on the real API server: three shards' engines
// read their namespace once, where each read it on its own before, and an engine started after
// every other stopped reads it anew.
func TestShardEnginesShareOneNamespaceReader(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	rc := rest.CopyConfig(env.Config)
	var reads atomic.Int32
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && req.URL.Path == "/api/v1/namespaces/"+ns {
				reads.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	op, err := New(Config{Rest: rc, Render: testOptions, Namespace: ns, Controllers: []string{"evaluator"}})
	if err != nil {
		t.Fatal(err)
	}
	// run runs the engines of shards of 3 until they are synced, and returns their stop.
	run := func(shards ...int) func() {
		sctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, i := range shards {
			wg.Go(func() {
				if err := op.RunShard(sctx, shard.Shard{Index: i, Count: 3}, nil); err != nil {
					t.Errorf("shard %d: %v", i, err)
				}
			})
		}
		clustertest.Eventually(t, ctx, "the shards' engines synced", func() error {
			if n := len(op.engines()); n != len(shards) || !op.Synced() {
				return fmt.Errorf("%d engines running, synced %v", n, op.Synced())
			}
			return nil
		})
		return func() { cancel(); wg.Wait() }
	}
	stop := run(0, 1, 2)
	// The reader polls every tenancy.PollInterval (10 s); the engines synced within it.
	if n := reads.Load(); n != 1 {
		t.Errorf("three shards' engines read their namespace %d times, want once", n)
	}
	stop()
	stop = run(1)
	defer stop()
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads of the namespace after an engine started alone, want 2 (one more)", n)
	}
}
