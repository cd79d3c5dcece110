package chart_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"evals.si/operator/apiclient"
	"evals.si/operator/apiclient/evalsid"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/reconcile"
)

// TestCreatorCannotBeForged installs evalsi-crds with the webhook disabled, so that only the
// admission policies the API server runs stand: alice creates an EvalRun and an OnlineEvalPolicy
// claiming to be mallory, the stored creator is alice, no update can change or remove it, and the
// reference evalsid records alice as the creator of the run and of the policy.
func TestCreatorCannotBeForged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	installCRDsChart(t)
	cs := env.Clientset()
	ns := "creator-test"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, namespace(ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:authenticated"}}
	alice := dynamic.NewForConfigOrDie(cfg)
	forged := map[string]any{"evals.si/created-by": "mallory"}
	objects := []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
			"metadata": map[string]any{"name": "smoke", "annotations": forged},
			"spec":     map[string]any{"suite": "smoke", "target": map[string]any{"endpoint": map[string]any{"url": "http://model:8000/v1", "model": "m"}}}}},
		{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "OnlineEvalPolicy",
			"metadata": map[string]any{"name": "creator-test-toxicity", "annotations": forged},
			"spec":     map[string]any{"traceSource": "prod", "samplingRate": 0.1, "evaluators": []any{"toxicity"}}}},
	}
	resources := map[string]string{"EvalRun": "evalruns", "OnlineEvalPolicy": "onlineevalpolicies"}
	for _, obj := range objects {
		gvr := evalsi(resources[obj.GetKind()])
		var got *unstructured.Unstructured
		// The policies take a moment to be in force after the chart is installed.
		clustertest.Eventually(t, ctx, obj.GetKind()+" created with the creator written by the API server", func() error {
			var err error
			got, err = alice.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return err
			}
			if c := got.GetAnnotations()["evals.si/created-by"]; c != "alice" {
				return fmt.Errorf("created-by %q", c)
			}
			return nil
		})
		got, err := alice.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := got.GetAnnotations()["evals.si/created-by"]; c != "alice" {
			t.Errorf("%s stored with created-by %q, want alice", obj.GetKind(), c)
		}
		for what, patch := range map[string]string{
			"changing it": `{"metadata":{"annotations":{"evals.si/created-by":"mallory"}}}`,
			"removing it": `{"metadata":{"annotations":{"evals.si/created-by":null}}}`,
		} {
			_, err := alice.Resource(gvr).Namespace(ns).Patch(ctx, obj.GetName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if err == nil || !strings.Contains(err.Error(), "cannot be changed or removed") {
				t.Errorf("%s: %s: %v, want a denial", obj.GetKind(), what, err)
			}
		}
	}

	// The operator forwards the recorded creator to evalsid.
	api := evalsid.New(map[string]string{"operator-token": "system:serviceaccount:" + ns + ":evalsi-operator"}, evalsid.Schedule{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go api.Serve(ctx, l)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("operator-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := reconcile.New(reconcile.Config{
		Rest: env.Config, Namespace: ns, Controllers: []string{"evalrun", "onlineevalpolicy"},
		API:               apiclient.Options{URL: "http://" + l.Addr().String(), TokenFile: tokenFile, CallTimeout: 2 * time.Second},
		DiscoveryInterval: 300 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ectx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ectx) }()
	defer func() { stop(); <-done }()
	clustertest.Eventually(t, ctx, "the run and the policy on the server", func() error {
		runs := api.Runs()
		if len(runs) != 1 {
			return fmt.Errorf("%d runs", len(runs))
		}
		if runs[0].Creator != "alice" {
			return fmt.Errorf("the run's creator is %q, want alice", runs[0].Creator)
		}
		p := api.Policy("creator-test-toxicity")
		if p == nil {
			return fmt.Errorf("no policy yet")
		}
		if p.Creator != "alice" {
			return fmt.Errorf("the policy's creator is %q, want alice", p.Creator)
		}
		return nil
	})
}

// TestMetricsAuthGranted checks that, with evalsi-crds installed, a team's operator (which the
// evalsi chart gives no cluster permission) may review tokens and access, as secured metrics need,
// and that a sandboxclass reader may get SandboxClasses.
func TestMetricsAuthGranted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	installCRDsChart(t)
	operator := "system:serviceaccount:some-team:evalsi-operator"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:some-team", "system:authenticated"}
	for _, c := range []authorizationv1.ResourceAttributes{
		{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"},
		{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
		{Verb: "get", Group: "evals.si", Resource: "sandboxclasses", Name: "gvisor"},
	} {
		clustertest.Eventually(t, ctx, fmt.Sprintf("%s %s allowed", c.Verb, c.Resource), func() error {
			sar, err := env.Clientset().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: operator, Groups: groups, ResourceAttributes: &c},
			}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !sar.Status.Allowed {
				return fmt.Errorf("denied: %s", sar.Status.Reason)
			}
			return nil
		})
	}
}

// TestTenantProvisionerIsFenced installs evalsi-crds with a tenant provisioner and acts as it:
// it may create a namespace with the tenant labels and a project binding, grant the tenant role
// there and make ordinary Secrets; it may not make a namespace without them, rebind a tenant
// namespace to another project, act in a namespace that is not a tenant's, bind another role,
// or make a service-account token Secret.
func TestTenantProvisionerIsFenced(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	helm(t, "upgrade", "--install", "evalsi-crds", "evalsi-crds", "-n", "evalsi-system", "--create-namespace",
		"--kubeconfig="+env.Kubeconfig, "--set", "webhook.enabled=false", "-f", filepath.Join("..", "testdata", "chart", "values", "evalsi-crds-tenants.yaml"))
	t.Cleanup(func() { installCRDsChart(t) })
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:platform:tenant-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:platform", "system:authenticated"}}
	p := kubernetes.NewForConfigOrDie(cfg)
	tenant := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	good := map[string]string{"evals.si/tenant": "true", "evals.si/project": "team-x"}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// In force once the policy (not RBAC, whose new bindings take a moment) refuses a probe.
	clustertest.Eventually(t, ctx, "the tenant policy in force", func() error {
		_, err := p.CoreV1().Namespaces().Create(ctx, tenant("probe-x", nil), dry)
		if err == nil || !strings.Contains(err.Error(), "tenant provisioner") {
			return fmt.Errorf("a probe gave %v", err)
		}
		return nil
	})
	if _, err := p.CoreV1().Namespaces().Create(ctx, tenant("team-x", good), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a tenant namespace: %v", err)
	}
	if _, err := env.Clientset().CoreV1().Namespaces().Create(ctx, tenant("not-a-tenant", nil), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := func(ns, role string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "team-x"}}}
	}
	secret := func(ns string, typ corev1.SecretType) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, Type: typ}
		if typ == corev1.SecretTypeServiceAccountToken {
			s.Annotations = map[string]string{"kubernetes.io/service-account.name": "default"}
		}
		return s
	}
	rebind := []byte(`{"metadata":{"labels":{"evals.si/project":"team-y"}}}`)
	_, rebindErr := p.CoreV1().Namespaces().Patch(ctx, "team-x", types.MergePatchType, rebind, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	_, unlabelErr := p.CoreV1().Namespaces().Patch(ctx, "team-x", types.MergePatchType, []byte(`{"metadata":{"labels":{"evals.si/tenant":null}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	_, rbOther := p.RbacV1().RoleBindings("not-a-tenant").Create(ctx, binding("not-a-tenant", "evalsi-tenant-access"), dry)
	_, rbAdmin := p.RbacV1().RoleBindings("team-x").Create(ctx, binding("team-x", "evalsi-tenant-provisioner"), dry)
	_, tokenErr := p.CoreV1().Secrets("team-x").Create(ctx, secret("team-x", corev1.SecretTypeServiceAccountToken), dry)
	_, noProject := p.CoreV1().Namespaces().Create(ctx, tenant("team-z", map[string]string{"evals.si/tenant": "true"}), dry)
	deleteOther := p.CoreV1().Namespaces().Delete(ctx, "not-a-tenant", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	for what, err := range map[string]error{
		"a namespace without a project binding":       noProject,
		"rebinding a tenant namespace":                rebindErr,
		"removing a tenant label":                     unlabelErr,
		"a RoleBinding outside tenant namespaces":     rbOther,
		"binding another role":                        rbAdmin,
		"a service-account token Secret":              tokenErr,
		"deleting a namespace that is not a tenant's": deleteOther,
	} {
		if err == nil || !strings.Contains(err.Error(), "tenant provisioner") {
			t.Errorf("%s: %v, want a denial by the tenant policy", what, err)
		}
	}
	_, rbOK := p.RbacV1().RoleBindings("team-x").Create(ctx, binding("team-x", "evalsi-tenant-access"), dry)
	_, secretOK := p.CoreV1().Secrets("team-x").Create(ctx, secret("team-x", corev1.SecretTypeOpaque), dry)
	for what, err := range map[string]error{
		"granting the tenant role in a tenant namespace": rbOK,
		"an ordinary Secret in a tenant namespace":       secretOK,
	} {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
}
