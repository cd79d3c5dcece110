package chart_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/cluster/clustertest"
)

// TestCheckpointWatcherRoleAsDocumented applies the checkpoint watcher's Role as docs/install.md
// gives it ("Running the checkpoint watcher", run as written) and makes the flow's writes as the
// watcher's service account, with evalsi-crds' admission policies in force: a CheckpointServer
// naming the checkpoint claim and the API key Secret of the Role is admitted, read, waited on
// and deleted, and so is an EvalRun of it; a server naming a claim the Role does not name is
// refused, naming it (so the admitted writes were judged).
func TestCheckpointWatcherRoleAsDocumented(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	installCRDsChart(t)
	const ns = "watcher-test"
	activeNamespace(t, ctx, ns, nil)
	clustertest.RunGuideSection(t, ctx, env, filepath.Join("..", "docs", "install.md"), "Running the checkpoint watcher", "NAMESPACE="+ns)
	watcher := impersonate("system:serviceaccount:"+ns+":checkpoint-watcher", "system:serviceaccounts", "system:serviceaccounts:"+ns)
	server := func(name, claim string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "CheckpointServer",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": "evalsi"}},
			"spec": map[string]any{"model": "/checkpoints/step-900", "checkpointClaim": claim,
				"apiKeySecret": map[string]any{"name": "vllm-keys", "key": "step-900"}}}}
	}
	servers := watcher.Resource(evalsi("checkpointservers")).Namespace(ns)
	// The Role's binding takes a moment to reach the authorizer.
	clustertest.Eventually(t, ctx, "the watcher's CheckpointServer admitted", func() error {
		_, err := servers.Create(ctx, server("step-900", "training-checkpoints"), metav1.CreateOptions{})
		return err
	})
	if _, err := servers.Get(ctx, "step-900", metav1.GetOptions{}); err != nil {
		t.Errorf("the watcher reading its server: %v", err)
	}
	if _, err := servers.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=step-900"}); err != nil {
		t.Errorf("the watcher waiting on its server (kubectl wait watches): %v", err)
	}
	runs := watcher.Resource(evalsi("evalruns")).Namespace(ns)
	run := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
		"metadata": map[string]any{"name": "eval-step-900"},
		"spec":     map[string]any{"suite": "smoke", "target": map[string]any{"checkpointServer": "step-900"}}}}
	if _, err := runs.Create(ctx, run, metav1.CreateOptions{}); err != nil {
		t.Errorf("the watcher's EvalRun: %v", err)
	}
	for what, err := range map[string]error{
		"deleting its EvalRun": runs.Delete(ctx, "eval-step-900", metav1.DeleteOptions{}),
		"deleting its server":  servers.Delete(ctx, "step-900", metav1.DeleteOptions{}),
	} {
		if err != nil {
			t.Errorf("the watcher %s: %v", what, err)
		}
	}
	_, err := servers.Create(ctx, server("step-1000", "someone-elses-checkpoints"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "someone-elses-checkpoints") {
		t.Errorf("a server naming a claim the Role does not name: %v, want a refusal naming it", err)
	}
}
