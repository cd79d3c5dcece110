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

// TestEndedTenureSendsNoEvalsidWrite runs the OnlineEvalPolicy kind under a shard's tenure
// against the reference evalsid. While the tenure is over, the engine reads (it asks evalsid for
// the policy) and writes nothing: no put, no status, and on deletion no delete and no release of
// the finalizer. Once the tenure is extended, the policy is put, and then deleted, once each.
// The policy carries its finalizer from its creation, so that the API server's fence (which
// would refuse adding it) is not what holds evalsid's calls back.
func TestEndedTenureSendsNoEvalsidWrite(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig(ns)
	cfg.Controllers = []string{"onlineevalpolicy"}
	var tenure shard.Tenure // never extended: over
	r := startEngineUnder(t, shard.WithTenure(context.Background(), &tenure), cfg)
	t.Cleanup(func() { r.stop(); r.wait(t) })

	const name = "fenced"
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "OnlineEvalPolicy",
		"metadata": map[string]any{"name": name, "finalizers": []any{evalsi.FinalizerDeletePolicy}},
		"spec":     map[string]any{"traceSource": "prod", "samplingRate": 0.1, "evaluators": []any{"toxicity"}, "enabled": true},
	}}
	if _, err := client(evalsi.OnlineEvalPolicies, ns).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	held := func(what, method string) {
		t.Helper()
		// A few of the engine's retries, one a second.
		time.Sleep(2500 * time.Millisecond)
		if n := api.Calls(method); n != 0 {
			t.Fatalf("%s: %d %s calls sent under an ended tenure", what, n, method)
		}
	}
	waitCalls(t, ctx, api, "GetPolicy", 1)
	held("created", "PutPolicy")
	if _, ok := getObj(t, ctx, evalsi.OnlineEvalPolicies, ns, name).Object["status"]; ok {
		t.Fatal("a status written under an ended tenure")
	}

	tenure.Extend(time.Now(), 8*time.Second) // time enough to put it and write its status
	waitReady(t, ctx, evalsi.OnlineEvalPolicies, ns, name, "True", evalsi.ReasonApplied)
	if n := api.Calls("PutPolicy"); n != 1 {
		t.Fatalf("%d PutPolicy calls once held, want 1", n)
	}
	time.Sleep(time.Until(tenure.Until()) + 100*time.Millisecond)

	if err := client(evalsi.OnlineEvalPolicies, ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	held("deleted", "DeletePolicy")
	if got := getObj(t, ctx, evalsi.OnlineEvalPolicies, ns, name); len(got.GetFinalizers()) == 0 {
		t.Fatal("the finalizer released under an ended tenure")
	}
	if api.Policy(name) == nil {
		t.Fatal("the policy is gone from evalsid")
	}

	tenure.Extend(time.Now(), time.Hour)
	waitGone(t, ctx, evalsi.OnlineEvalPolicies, ns, name)
	if n := api.Calls("DeletePolicy"); n != 1 {
		t.Errorf("%d DeletePolicy calls once held, want 1", n)
	}
	if api.Policy(name) != nil {
		t.Error("the policy is still on evalsid")
	}
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
