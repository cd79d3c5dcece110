package tenancy

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
)

var shared = clustertest.New(cluster.Options{})

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// TestNamespacesFollowBindings reads project bindings on the real control plane: from a watch of
// every Namespace (told of a changed binding), and, as a namespaced service account whose Role
// only lets it get its own Namespace, from that one Namespace; neither knows anything before its
// first read, nor a namespace it was not given.
func TestNamespacesFollowBindings(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Clientset()
	for _, n := range []string{"team-a", "team-b"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().ServiceAccounts("team-b").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "evalsid"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "own-namespace"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{"team-b"}, Verbs: []string{"get"}}}}
	if _, err := cs.RbacV1().Roles("team-b").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "own-namespace"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "own-namespace"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "evalsid", Namespace: "team-b"}}}
	if _, err := cs.RbacV1().RoleBindings("team-b").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	all := WatchNamespaces(ctx, cs, "")
	var mu sync.Mutex
	var changed []string
	all.OnLabelsChanged(func(ns string) {
		mu.Lock()
		defer mu.Unlock()
		changed = append(changed, ns)
	})
	saCfg, _ := clustertest.TokenKubeconfig(t, ctx, c, "team-b", "evalsid")
	one := WatchNamespaces(ctx, kubernetes.NewForConfigOrDie(saCfg), "team-b")
	clustertest.Eventually(t, ctx, "both read", func() error {
		if !all.HasSynced() || !one.HasSynced() {
			return context.DeadlineExceeded
		}
		return nil
	})
	// project is the project a reader says namespace acts in ("" for none), and whether it knows
	// namespace.
	project := func(n *Namespaces, namespace string) (string, bool) {
		labels, ok := n.Labels(namespace)
		p, _ := evalsi.ProjectOf(namespace, labels, n.Claimed(namespace))
		return p, ok
	}
	if p, ok := project(all, "team-a"); !ok || p != "team-a" {
		t.Errorf("team-a acts in %q (known %v), want team-a", p, ok)
	}
	if p, ok := project(one, "team-b"); !ok || p != "team-b" {
		t.Errorf("the namespaced reader: team-b acts in %q (known %v), want team-b", p, ok)
	}
	if _, ok := project(one, "team-a"); ok {
		t.Error("the namespaced reader knows team-a")
	}
	if _, ok := project(all, "no-such-namespace"); ok {
		t.Error("a namespace that does not exist is known")
	}

	patch := []byte(`{"metadata":{"labels":{"` + evalsi.LabelProject + `":"team-a"}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "team-b", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "team-b bound to team-a, from the watch and from the namespaced reader", func() error {
		mu.Lock()
		told := slices.Contains(changed, "team-b") && slices.Contains(changed, "team-a")
		mu.Unlock()
		p1, _ := project(all, "team-b")
		p2, _ := project(one, "team-b")
		if !told || p1 != "team-a" || p2 != "team-a" {
			return fmt.Errorf("told of team-b and team-a: %v; team-b acts in %q, and to the namespaced reader in %q", told, p1, p2)
		}
		return nil
	})
	// Once team-a's namespaces are bound by label, the namespace named like the project acts in
	// it only by the label too: else anyone who may create namespaces could make one named like
	// a project whose namespaces are all bound, and act in it.
	if p, _ := project(all, "team-a"); p != "" {
		t.Errorf("team-a, unlabelled while team-b is bound to project team-a, acts in %q, want none", p)
	}
	patch = []byte(`{"metadata":{"labels":{"` + evalsi.LabelProject + `":"team-a"}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "team-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "team-a bound to its own project by label", func() error {
		if p, _ := project(all, "team-a"); p != "team-a" {
			return fmt.Errorf("team-a acts in %q", p)
		}
		return nil
	})

	// A namespace made after the first read is told of too: objects in it may have been judged
	// before the watch brought it.
	bound := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a-notebooks", Labels: map[string]string{evalsi.LabelProject: "team-a"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, bound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "a new namespace told of", func() error {
		mu.Lock()
		told := slices.Contains(changed, "team-a-notebooks")
		mu.Unlock()
		if p, _ := project(all, "team-a-notebooks"); !told || p != "team-a" {
			return fmt.Errorf("told %v, project %q", told, p)
		}
		return nil
	})
	// The namespaces of the first read (team-a, default, kube-system, ...) are no change.
	mu.Lock()
	defer mu.Unlock()
	for _, ns := range changed {
		if ns != "team-b" && ns != "team-a" && ns != "team-a-notebooks" {
			t.Errorf("told of %s, which was there before the first read and did not change", ns)
		}
	}
}

// A Namespaces watched again after its watch ended forgets the namespaces deleted in between, on
// the real control plane: a binding of a deleted namespace claims its project no more.
func TestNamespacesWatchedAgainForgetTheDeleted(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Clientset()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rewatched", Labels: map[string]string{evalsi.LabelProject: "rewatched-project"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := NewNamespaces()
	first, stop := context.WithCancel(ctx)
	n.Watch(first, cs, "")
	if !n.WaitForSync(ctx) || !n.Claimed("rewatched-project") {
		t.Fatal("the binding is not read")
	}
	stop()
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the namespace deleted", func() error {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("it is still there")
		}
		return nil
	})
	n.Watch(ctx, cs, "")
	clustertest.Eventually(t, ctx, "the deleted namespace forgotten", func() error {
		if n.Claimed("rewatched-project") {
			return fmt.Errorf("its binding still claims the project")
		}
		return nil
	})
}
