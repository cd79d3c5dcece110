package evalsid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
)

// TestNewClassIsNotRefusedForGood: a SandboxClass that evalsid's watch has not brought yet (made
// a moment before the run that names it, as the examples of make dev are) is read from the API
// server, so the run is judged by the class; only a class the API server does not have either
// is refused as missing (FailedPrecondition, for good), and a class that does not admit the
// namespace is still refused.
func TestNewClassIsNotRefusedForGood(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := watchedCluster(t, ctx, c)
	evalsid.MissNewClasses(dir)
	for name, spec := range map[string]map[string]any{
		"fresh":        {"rung": "landlock", "allowedNamespaces": map[string]any{}},
		"fresh-closed": {"rung": "landlock", "allowedNamespaces": map[string]any{"matchLabels": map[string]any{"sandbox.evals.si/closed": "yes"}}},
	} {
		class := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass", "metadata": map[string]any{"name": name}, "spec": spec,
		}}
		if _, err := c.Dynamic().Resource(evalsi.SandboxClasses).Create(ctx, class, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := dir.MayUseClass("default", "fresh"); !ok || err != nil {
		t.Errorf("a class the watch has not brought yet: may use %v, %v; want true", ok, err)
	}
	if ok, err := dir.MayUseClass("default", "fresh-closed"); ok || err != nil {
		t.Errorf("a new class that does not admit the namespace: may use %v, %v; want false", ok, err)
	}
	ok, err := dir.MayUseClass("default", "no-such-class")
	if ok || err == nil || errors.Is(err, evalsid.ErrNotKnownYet) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a class the API server does not have: may use %v, %v; want that it does not exist", ok, err)
	}
}

// TestNewNamespaceActsInItsProject: a namespace that evalsid's watch has not brought yet (made a
// moment before its pools and operator call) is read from the API server, so its callers act in
// the project it is bound to at once rather than being refused; a namespace the API server does
// not have either is refused for good (a token outliving its namespace), not retried, and is
// not read again at each call.
func TestNewNamespaceActsInItsProject(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := watchedCluster(t, ctx, c)
	evalsid.MissNewNamespaces(dir)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh-notebooks",
		Labels: map[string]string{evalsi.LabelProject: "fresh", "sandbox.evals.si/fresh": "yes"}}}
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	class := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass",
		"metadata": map[string]any{"name": "for-fresh"},
		"spec":     map[string]any{"rung": "landlock", "allowedNamespaces": map[string]any{"matchLabels": map[string]any{"sandbox.evals.si/fresh": "yes"}}}}}
	if _, err := c.Dynamic().Resource(evalsi.SandboxClasses).Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := dir.Project("fresh-notebooks"); p != "fresh" || err != nil {
		t.Errorf("a namespace the watch has not brought yet acts in %q, %v; want fresh", p, err)
	}
	clustertest.Eventually(t, ctx, "the class read", func() error {
		ok, err := dir.MayUseClass("fresh-notebooks", "for-fresh")
		if !ok || err != nil {
			return fmt.Errorf("may use %v, %v", ok, err)
		}
		return nil
	})
	reads := evalsid.CountNamespaceReads(dir)
	for range 3 {
		if p, err := dir.Project("no-such-namespace"); err == nil || errors.Is(err, evalsid.ErrNotKnownYet) {
			t.Errorf("a namespace the API server does not have: %q, %v; want refused for good", p, err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("three calls from a namespace that does not exist read it %d times, want once", n)
	}
}

// watchedCluster installs the CRDs on c and returns evalsid's directory of it, once it has read
// the cluster.
func watchedCluster(t *testing.T, ctx context.Context, c *cluster.Cluster) *evalsid.Cluster {
	t.Helper()
	if err := c.InstallCRDs(ctx, "../chart/evalsi-crds/files/crds"); err != nil {
		t.Fatal(err)
	}
	dir, err := evalsid.WatchCluster(ctx, c.Config, "")
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the cluster read", func() error {
		if !dir.HasSynced() {
			return errors.New("not yet")
		}
		return nil
	})
	return dir
}
