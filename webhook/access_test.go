package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// TestPoolsBoundedByTheirWriter: a user who may write evals.si objects but not read Secrets or
// run pods (as evalsi-tenant-access grants) cannot get, through an Evaluator or a
// CheckpointServer, a pod that runs as a platform account or an account not opened to pools,
// reads a Secret they may not get, or asks for more replicas than the platform allows; the same
// user's ordinary Evaluator is admitted, and so is a metadata-only change to an object someone
// with more rights wrote.
func TestPoolsBoundedByTheirWriter(t *testing.T) {
	ctx := testContext(t)
	startWebhook(t, ctx, time.Hour, func(c *Config) { c.Limits = render.Limits{MaxPoolReplicas: render.DefaultMaxPoolReplicas} })
	ns := ensureNamespace(t, ctx, "team-bounded")
	cs := env.Clientset()
	for name, labels := range map[string]map[string]string{
		"open-to-pools": {evalsi.LabelPoolServiceAccount: "true"},
		"cloud-admin":   nil,
	} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}}
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	createSecret(t, ctx, ns, "db-password")
	// model-key is readable by the user; db-password is not.
	createSecret(t, ctx, ns, "model-key")
	grantSecretRead(t, ctx, ns, "model-key", "tina")
	tina := asUser(t, ctx, ns, "tina")

	evaluator := func(name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}}
	}
	secretEnv := func(secret string) []any {
		return []any{map[string]any{"name": "KEY", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": secret, "key": "api-key"}}}}
	}
	for name, tc := range map[string]struct {
		obj  *unstructured.Unstructured
		want string // "" for admitted
	}{
		"an ordinary Evaluator":      {obj: evaluator("plain", map[string]any{"replicas": int64(2)})},
		"an account opened to pools": {obj: evaluator("opened", map[string]any{"serviceAccountName": "open-to-pools"})},
		"a Secret the user may get":  {obj: evaluator("readable", map[string]any{"env": secretEnv("model-key")})},
		"the operator's account": {obj: evaluator("as-operator", map[string]any{"serviceAccountName": "evalsi-operator"}),
			want: "/spec/serviceAccountName: evalsi-operator is one of the platform's own service accounts"},
		"an account not opened to pools": {obj: evaluator("as-cloud-admin", map[string]any{"serviceAccountName": "cloud-admin"}),
			want: "/spec/serviceAccountName: service account cloud-admin is not open to pools"},
		"an account that does not exist": {obj: evaluator("as-nobody", map[string]any{"serviceAccountName": "nobody"}),
			want: "/spec/serviceAccountName: service account nobody does not exist"},
		"a Secret the user may not get": {obj: evaluator("reads-db", map[string]any{"env": secretEnv("db-password")}),
			want: "/spec/env/0/valueFrom/secretKeyRef/name: tina may not get secrets db-password"},
		"ten thousand replicas": {obj: evaluator("huge", map[string]any{"replicas": int64(10000)}),
			want: "/spec/replicas: must be <= 1000"},
		"more replicas than the platform allows": {obj: evaluator("large", map[string]any{"autoscaling": map[string]any{"maxReplicas": int64(500)}}),
			want: "/spec/autoscaling/maxReplicas: 500 replicas: the platform allows at most 100 per pool"},
		"a CheckpointServer's key the user may not get": {obj: &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "evals.si/v1alpha1", "kind": "CheckpointServer", "metadata": map[string]any{"name": "m", "namespace": ns},
			"spec": map[string]any{"model": "org/m", "apiKeySecret": map[string]any{"name": "db-password"}}}},
			want: "/spec/apiKeySecret/name: tina may not get secrets db-password"},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			// The user's RoleBindings reach the API server's authorizer a moment after they are made.
			clustertest.Eventually(t, ctx, "an answer that is not RBAC's", func() error {
				err = create(ctx, tina, tc.obj)
				if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot create resource") {
					return err
				}
				if tc.want == "" && err != nil && strings.Contains(err.Error(), "may not get") {
					return err
				}
				return nil
			})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a refusal with %q", err, tc.want)
			}
		})
	}

	// An Evaluator the namespace's admin wrote with the Secret: tina may label it, not change
	// its spec.
	admins := env.Dynamic().Resource(gvr("Evaluator")).Namespace(ns)
	if _, err := admins.Create(ctx, evaluator("admins", map[string]any{"env": secretEnv("db-password")}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mine := tina.Resource(gvr("Evaluator")).Namespace(ns)
	if _, err := mine.Patch(ctx, "admins", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a label on someone else's Evaluator: %v", err)
	}
	_, err := mine.Patch(ctx, "admins", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "tina may not get secrets db-password") {
		t.Errorf("a spec change of an Evaluator whose Secret tina may not get: %v, want a refusal", err)
	}
}

// TestAccessAnswersFollowRights: twenty reviews naming the same Secret ask the API server once
// (the answer is kept, and the reviews in flight share it); once the writer's right to get it is
// revoked, their next object naming it is refused (the kept answer lives AllowedTTL), and once
// granted again, admitted (a refusal lives DeniedTTL).
func TestAccessAnswersFollowRights(t *testing.T) {
	ctx := testContext(t)
	w := startWebhook(t, ctx, time.Hour, func(c *Config) { c.AllowedTTL, c.DeniedTTL = 10*time.Second, 2*time.Second })
	ns := ensureNamespace(t, ctx, "team-answers")
	createSecret(t, ctx, ns, "model-key")
	grant := func() { grantSecretRead(t, ctx, ns, "model-key", "uma") }
	uma := asUser(t, ctx, ns, "uma")
	server := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "CheckpointServer",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"model": "org/m", "apiKeySecret": map[string]any{"name": "model-key"}}}}
	}
	refused := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "uma may not get secrets model-key")
	}
	// awaitAnswer creates a server until its answer is want (true: admitted), and returns how
	// often the webhook has asked the API server by then.
	awaitAnswer := func(what string, admitted bool) float64 {
		t.Helper()
		clustertest.Eventually(t, ctx, what, func() error {
			err := create(ctx, uma, server("probe"))
			if admitted && err != nil || !admitted && !refused(err) {
				return fmt.Errorf("answered %v", err)
			}
			return nil
		})
		return webhookCounter(t, w.health, "evalsi_webhook_access_answers_total", "asked")
	}

	grant()
	before := awaitAnswer("uma's server admitted", true)
	const reviews = 20
	errs := make(chan error, reviews)
	for i := range reviews {
		go func() { errs <- create(ctx, uma, server(fmt.Sprintf("s%d", i))) }()
	}
	for range reviews {
		if err := <-errs; err != nil {
			t.Errorf("a server naming a Secret uma may get: %v", err)
		}
	}
	if asked := webhookCounter(t, w.health, "evalsi_webhook_access_answers_total", "asked") - before; asked != 0 {
		t.Errorf("%d reviews asked the API server %v times, want none (the answer was kept)", reviews, asked)
	}

	if err := env.Clientset().RbacV1().RoleBindings(ns).Delete(ctx, "uma-reads-model-key", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitAnswer("uma's server refused once her right is revoked", false)
	grant()
	awaitAnswer("uma's server admitted once her right is granted again", true)
}

// webhookCounter reads the counter name{source} of the webhook serving health.
func webhookCounter(t *testing.T, health, name, source string) float64 {
	t.Helper()
	var sum float64
	for _, m := range clustertest.Scrape(t, "http://"+health+"/metrics")[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "source" && l.GetValue() == source {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// createSecret makes Secret name in ns, unless it exists.
func createSecret(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"api-key": "sk-1"}}
	if _, err := env.Clientset().CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// grantSecretRead lets user get Secret secret of ns, and nothing else: Role read-<secret>, bound
// by RoleBinding <user>-reads-<secret>.
func grantSecretRead(t *testing.T, ctx context.Context, ns, secret, user string) {
	t.Helper()
	cs := env.Clientset()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-" + secret, Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get"}}}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-reads-" + secret, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
