package reconcile

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
)

// outages and outageLength are the API server's stops in TestRepairAfterRepeatedOutages: enough,
// in a row, for a reflector's backoff (doubling from 0.8 s to 30 s, forgotten after two minutes
// without a failure) to reach its cap, had the informers failed their calls while it was gone.
// `go test ./reconcile -run RepeatedOutages -args -outage-length=15s` gives the figure for longer
// stops.
const outages = 5

var outageLength = flag.Duration("outage-length", 5*time.Second, "how long each of TestRepairAfterRepeatedOutages's API server stops lasts")

// TestRepairAfterRepeatedOutages stops the API server outages times in a row; right after its last
// return, a pool's Deployment is deleted, and the operator must make it again. It reports how long
// that took after the return: the informers' calls were held while the server was gone
// (apigate.go), so no backoff of theirs has grown, and the figure is the time to notice the
// return, watch again and reconcile (a few seconds; before the gate it was up to 30 s). It runs on
// a control plane of its own: the controller-manager, scheduler and KWOK back off through the
// outages too, and would slow the package's other tests.
func TestRepairAfterRepeatedOutages(t *testing.T) {
	t.Parallel() // see envMu
	if testing.Short() {
		t.Skip("stops and starts an API server of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 1, CRDDirs: []string{crdDir}, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop) // after the engine's cleanup, which startEngine registers later
	dyn := c.Dynamic()
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-o"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := startEngine(t, Config{Rest: c.Config, Namespace: "team-o"})
	evaluator := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": "judge", "namespace": "team-o"},
		"spec":     map[string]any{"image": "evalsi/judge:1"},
	}}
	if _, err := dyn.Resource(evalsi.Evaluators).Namespace("team-o").Create(ctx, evaluator, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deployments := dyn.Resource(evalsi.Deployments).Namespace("team-o")
	made := func() error {
		d, err := deployments.Get(ctx, "judge-evaluator", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.GetDeletionTimestamp() != nil {
			return fmt.Errorf("still the deleted one")
		}
		return nil
	}
	clustertest.Eventually(t, ctx, "the pool's Deployment made", made)

	for i := range outages {
		c.StopAPIServer()
		time.Sleep(*outageLength)
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatalf("starting the API server after outage %d: %v", i+1, err)
		}
	}
	back, errorsBefore := time.Now(), r.counter(t, "evalsi_informer_errors_total", "")
	if err := deployments.Delete(ctx, "judge-evaluator", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the pool's Deployment made again after the outages", made)
	t.Logf("after %d API server outages of %s in a row, a deleted child was made again %.1fs after the server's last return",
		outages, *outageLength, time.Since(back).Seconds())
	// Counted, not timed: the informers' lists and watches were held while the server was gone,
	// and none failed to its reflector, so no backoff of theirs grew (without the gate, every
	// one fails and nothing is held).
	held, failed := r.counter(t, "evalsi_kube_unreachable_calls_total", "held"), r.counter(t, "evalsi_kube_unreachable_calls_total", "failed")
	if held == 0 || failed != 0 {
		t.Errorf("informer calls that found the API server gone: %v held, %v failed to a reflector; want some held and none failed", held, failed)
	}
	// And from the reflectors' side, counted by their own error handler, not by the gate: no list
	// or watch brought one an error, through the outages or after the server's last return (each
	// would have made it wait a backoff).
	if after := r.counter(t, "evalsi_informer_errors_total", "") - errorsBefore; errorsBefore != 0 || after != 0 {
		t.Errorf("errors that reached the informers' reflectors: %v through the outages, %v after the last return; want none", errorsBefore, after)
	}
}
