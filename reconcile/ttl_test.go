package reconcile

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
)

// TestFinishedEvalRunsExpire runs an engine whose finished EvalRuns stay an hour (--evalrun-ttl)
// with three runs: one whose annotation shortens that to two seconds, one that keeps it, and
// one annotated never. Only the first goes, at its time, without a call to evalsid: its run and
// results stay there; the second shows when it will go, the third that it stays.
func TestFinishedEvalRunsExpire(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig(ns)
	cfg.EvalRunTTL = time.Hour
	running := startEngine(t, cfg)
	ended := map[string]time.Time{}
	for name, ttl := range map[string]string{"short": "2s", "default": "", "kept": evalsi.TTLNever} {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
			"metadata": map[string]any{"name": name}, "spec": runSpec(nil),
		}}
		if ttl != "" {
			obj.SetAnnotations(map[string]string{evalsi.AnnotationTTLAfterFinished: ttl})
		}
		if _, err := client(evalsi.EvalRuns, ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitPhase(t, ctx, ns, name, "Pending")
		id, _, _ := unstructured.NestedString(got.Object, "status", "runId")
		if err := api.SetPhase(id, v1.Phase_PHASE_SUCCEEDED); err != nil {
			t.Fatal(err)
		}
		ended[name] = time.Now()
	}
	for _, name := range []string{"short", "default", "kept"} {
		if _, err := client(evalsi.EvalRuns, ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			// The reconcile that saw the run end let the finalizer go before writing the phase.
			if f := waitPhase(t, ctx, ns, name, "Succeeded").GetFinalizers(); len(f) != 0 {
				t.Errorf("EvalRun %s is Succeeded and still holds finalizers %v", name, f)
			}
		}
	}
	before := len(api.CallLog())

	clustertest.Eventually(t, ctx, "the short-lived EvalRun deleted", func() error {
		if _, err := client(evalsi.EvalRuns, ns).Get(ctx, "short", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	// The run's end is recorded to the second (status.completedAt), so it may go up to a second
	// early.
	went := time.Since(ended["short"])
	t.Logf("the EvalRun with a TTL of 2s went %.1fs after its run ended", went.Seconds())
	if went < time.Second {
		t.Errorf("deleted %s after its run ended, before its TTL of 2s", went)
	}
	if n := len(api.CallLog()) - before; n != 0 {
		t.Errorf("%d calls to evalsid after the runs ended; expiring calls nothing", n)
	}
	if runs := api.Runs(); len(runs) != 3 || api.Calls("CancelRun") != 0 {
		t.Errorf("%d runs on evalsid and %d cancels after the expiry, want 3 and 0: a finished run and its results stay", len(runs), api.Calls("CancelRun"))
	}
	clustertest.Eventually(t, ctx, "an Expired event", func() error {
		events, err := env.Clientset().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + evalsi.ReasonExpired})
		if err != nil || len(events.Items) != 1 || events.Items[0].InvolvedObject.Name != "short" {
			return fmt.Errorf("%d (%v)", len(events.Items), err)
		}
		return nil
	})

	def := waitPhase(t, ctx, ns, "default", "Succeeded")
	at, _, _ := unstructured.NestedString(def.Object, "status", "expiresAt")
	if when, err := time.Parse(time.RFC3339, at); err != nil || when.Sub(ended["default"]) < 59*time.Minute || when.Sub(ended["default"]) > 61*time.Minute {
		t.Errorf("status.expiresAt %q of an EvalRun with the hour's default, want about an hour after its run ended", at)
	}
	kept := waitPhase(t, ctx, ns, "kept", "Succeeded")
	if at, found, _ := unstructured.NestedString(kept.Object, "status", "expiresAt"); found {
		t.Errorf("status.expiresAt %q of an EvalRun annotated never", at)
	}

	// A finished run needs nothing at deletion: no finalizer, so it goes with the operator stopped.
	running.stop()
	running.wait(t)
	if err := client(evalsi.EvalRuns, ns).Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, evalsi.EvalRuns, ns, "kept")
}
