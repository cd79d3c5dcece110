package reconcile

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
)

// TestWarmEngineReconcilesAndHoldsItsWrites runs an engine that warms a shard (its writes held
// until the shard's Lease is taken) over three Evaluators: one converged, one whose pool was
// deleted, one new. Before it may write, it reconciles all three, finds the converged one done
// and the other two in need of a write, and sends nothing: the pool stays deleted, the new one
// has no children and no status. Once it may write, it writes those two, which it held, without
// being told of them again.
func TestWarmEngineReconcilesAndHoldsItsWrites(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	cfg := Config{Namespace: ns, Controllers: []string{"evaluator"}}
	first := startEngineNoCleanup(t, cfg)
	createJudges(t, ctx, ns, 2)
	waitJudgesAvailable(t, ctx, ns, 2)
	settled(t, ctx, first.Engine)
	first.stop()
	first.wait(t)

	if err := client(evalsi.Deployments, ns).Delete(ctx, "judge-0-evaluator", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "judge-2", map[string]any{})
	writable := make(chan struct{})
	warm := startWarmEngine(t, ctx, cfg, writable)
	t.Cleanup(func() { warm.stop(); warm.wait(t) })
	metrics := warm.Metrics()
	clustertest.Eventually(t, ctx, "judge-0 and judge-2 held, judge-1 reconciled", func() error {
		held, done := metrics.ReconcileCount("evaluator", "held"), metrics.ReconcileCount("evaluator", "success")
		if held < 2 || done < 1 {
			return fmt.Errorf("%v held, %v reconciled", held, done)
		}
		return nil
	})
	if n := writes(warm.Engine); n != 0 {
		t.Errorf("the warm engine sent %v writes", n)
	}
	if _, err := client(evalsi.Deployments, ns).Get(ctx, "judge-0-evaluator", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("judge-0's pool: %v, want it not made again before the engine may write", err)
	}
	if _, err := client(evalsi.Deployments, ns).Get(ctx, "judge-2-evaluator", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("judge-2's pool: %v, want none before the engine may write", err)
	}
	if _, ok := getObj(t, ctx, evalsi.Evaluators, ns, "judge-2").Object["status"]; ok {
		t.Error("judge-2 has a status written before the engine may write")
	}

	close(writable)
	start := time.Now()
	waitJudgesAvailable(t, ctx, ns, 3)
	t.Logf("every judge Available %s after the engine may write", time.Since(start).Round(time.Millisecond))
	if done := metrics.ReconcileCount("evaluator", "success"); done < 3 {
		t.Errorf("%v reconciles succeeded, want at least 3", done)
	}
}
