package reconcile

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
	"evals.si/operator/shard"
)

// TestEndedTenureSendsNoEvalsidWrite runs the OnlineEvalPolicy kind against the reference evalsid
// by turns under a shard's tenure that is over and one that holds, an engine for each turn (a
// tenure only ever extends). While the tenure is over, the engine reads (it asks evalsid for the
// policy) and writes nothing: no put, no status, and on deletion no delete and no release of the
// finalizer, however many times it tries. Under a tenure that holds, the policy is put, and then
// deleted, once each. The policy carries its finalizer from its creation, so that the API
// server's fence (which would refuse adding it) is not what holds evalsid's calls back.
func TestEndedTenureSendsNoEvalsidWrite(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig(ns)
	cfg.Controllers = []string{"onlineevalpolicy"}
	over := func() context.Context {
		return shard.WithTenure(context.Background(), &shard.Tenure{}) // never extended
	}
	holds := func() context.Context {
		var tenure shard.Tenure
		tenure.Extend(time.Now(), time.Hour)
		return shard.WithTenure(context.Background(), &tenure)
	}
	// turn runs an engine under ctx until the turn's checks are done.
	turn := func(ctx context.Context, checks func(r runningEngine)) {
		t.Helper()
		r := startEngineUnder(t, ctx, cfg)
		defer func() { r.stop(); r.wait(t) }()
		checks(r)
	}
	// heldBack waits until the engine has tried three times and been held back by the tenure's
	// end each time, and then wants no call of method sent.
	heldBack := func(r runningEngine, what, method string) {
		t.Helper()
		clustertest.Eventually(t, ctx, what+": three tries held back by the tenure's end", func() error {
			if n := r.Metrics().ReconcileCount("onlineevalpolicy", "requeue"); n < 3 {
				return fmt.Errorf("%v tries held back", n)
			}
			return nil
		})
		if n := api.Calls(method); n != 0 {
			t.Fatalf("%s: %d %s calls sent under an ended tenure", what, n, method)
		}
	}

	const name = "fenced"
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "OnlineEvalPolicy",
		"metadata": map[string]any{"name": name, "finalizers": []any{evalsi.FinalizerDeletePolicy}},
		"spec":     map[string]any{"traceSource": "prod", "samplingRate": 0.1, "evaluators": []any{"toxicity"}, "enabled": true},
	}}
	if _, err := client(evalsi.OnlineEvalPolicies, ns).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	turn(over(), func(r runningEngine) {
		waitCalls(t, ctx, api, "GetPolicy", 1)
		heldBack(r, "created", "PutPolicy")
		if _, ok := getObj(t, ctx, evalsi.OnlineEvalPolicies, ns, name).Object["status"]; ok {
			t.Fatal("a status written under an ended tenure")
		}
	})
	turn(holds(), func(runningEngine) {
		waitReady(t, ctx, evalsi.OnlineEvalPolicies, ns, name, "True", evalsi.ReasonApplied)
		if n := api.Calls("PutPolicy"); n != 1 {
			t.Fatalf("%d PutPolicy calls once held, want 1", n)
		}
	})

	if err := client(evalsi.OnlineEvalPolicies, ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	turn(over(), func(r runningEngine) {
		heldBack(r, "deleted", "DeletePolicy")
		if got := getObj(t, ctx, evalsi.OnlineEvalPolicies, ns, name); len(got.GetFinalizers()) == 0 {
			t.Fatal("the finalizer released under an ended tenure")
		}
		if api.Policy(name) == nil {
			t.Fatal("the policy is gone from evalsid")
		}
	})
	turn(holds(), func(runningEngine) {
		waitGone(t, ctx, evalsi.OnlineEvalPolicies, ns, name)
		if n := api.Calls("DeletePolicy"); n != 1 {
			t.Errorf("%d DeletePolicy calls once held, want 1", n)
		}
		if api.Policy(name) != nil {
			t.Error("the policy is still on evalsid")
		}
	})
}

// waitCalls waits until evalsid has received at least n calls of method.
func waitCalls(t *testing.T, ctx context.Context, api testEvalsid, method string, n int) {
	t.Helper()
	clustertest.Eventually(t, ctx, fmt.Sprintf("%d %s calls", n, method), func() error {
		if got := api.Calls(method); got < n {
			return fmt.Errorf("%d %s calls", got, method)
		}
		return nil
	})
}
