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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"evals.si/operator/apiclient"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsid"
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
	activeNamespace(t, ctx, ns, nil)
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
	defer func() { stop(); clustertest.Await(t, "the engine", done) }()
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

// TestNoTeamAccountReviewsTokens checks, with evalsi-crds installed, that no team's account may
// create TokenReviews or SubjectAccessReviews, which would let any editor of its namespace (who
// can run a pod as it) learn whose a token is and who may do what: neither a team's operator nor
// a pool, and no value of the chart grants a team's operator them (metricsAuth.operatorNamespaces
// is gone; subjects are for platform-held accounts). Every service account may read
// SandboxClasses.
func TestNoTeamAccountReviewsTokens(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := helmErr(t, "upgrade", "--install", "evalsi-crds", "evalsi-crds", "-n", "evalsi-system", "--create-namespace",
		"--kubeconfig="+env.Kubeconfig, "--set", "webhook.enabled=false", "--set", "metricsAuth.operatorNamespaces={some-team}"); err == nil {
		t.Errorf("evalsi-crds installed with metricsAuth.operatorNamespaces, want it refused:\n%s", out)
	}
	installCRDsChart(t)
	account := func(ns, name string) (string, []string) {
		return "system:serviceaccount:" + ns + ":" + name, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	review := func(user string, groups []string, c authorizationv1.ResourceAttributes) (bool, error) {
		sar, err := env.Clientset().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &c},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	}
	classes := []authorizationv1.ResourceAttributes{
		{Verb: "get", Group: "evals.si", Resource: "sandboxclasses", Name: "gvisor"},
		{Verb: "watch", Group: "evals.si", Resource: "sandboxclasses"},
	}
	operator, operatorGroups := account("some-team", "evalsi-operator")
	for _, c := range classes {
		clustertest.Eventually(t, ctx, fmt.Sprintf("%s %s allowed", c.Verb, c.Resource), func() error {
			ok, err := review(operator, operatorGroups, c)
			if err == nil && !ok {
				err = fmt.Errorf("denied")
			}
			return err
		})
	}
	for _, who := range [][2]string{{"some-team", "evalsi-operator"}, {"some-team", "judge-evaluator"}} {
		user, groups := account(who[0], who[1])
		for _, c := range []authorizationv1.ResourceAttributes{
			{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"},
			{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
		} {
			if ok, err := review(user, groups, c); err != nil || ok {
				t.Errorf("%s may %s %s (%v), want denied", user, c.Verb, c.Resource, err)
			}
		}
	}
}

// TestTenantProvisionerIsFenced impersonates a tenant provisioner, which RBAC lets write
// Namespaces, RoleBindings, Secrets, quotas and limit ranges, so that only the policy stands: it
// may create a tenant namespace bound to the project named like it, grant evalsi-tenant-access
// there, write Secrets it labels as its own, and give the namespace a quota and limits within the
// values; it may not make a namespace without a binding or join another team's project, rebind a
// namespace or set sandbox.evals.si labels, act outside tenant namespaces, bind another role or
// remove the team's own binding, touch a Secret it did not make (the operator's TLS Secret), make
// a service-account token Secret, or exceed the quota and limits.
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
	secret := func(ns, name string, typ corev1.SecretType, provisioned bool) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: typ}
		if provisioned {
			s.Labels = map[string]string{"evals.si/provisioned": "true"}
		}
		if typ == corev1.SecretTypeServiceAccountToken {
			s.Annotations = map[string]string{"kubernetes.io/service-account.name": "default"}
		}
		return s
	}
	// What the team and the platform keep in the tenant namespace: the operator's TLS Secret and
	// a RoleBinding of another role.
	admin := env.Clientset()
	if _, err := admin.CoreV1().Secrets("team-x").Create(ctx, secret("team-x", "evalsi-operator-tls", corev1.SecretTypeOpaque, false), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	teamAdmin := binding("team-x", "admin")
	teamAdmin.Name = "team-admins"
	if _, err := admin.RbacV1().RoleBindings("team-x").Create(ctx, teamAdmin, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dryDelete := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	quota := func(hard corev1.ResourceList) *corev1.ResourceQuota {
		return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "evalsi-tenant", Namespace: "team-x"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	}
	withinQuota := corev1.ResourceList{"pods": resource.MustParse("50"), "requests.cpu": resource.MustParse("8"),
		"requests.memory": resource.MustParse("32Gi"), "requests.nvidia.com/gpu": resource.MustParse("0")}
	overQuota := withinQuota.DeepCopy()
	overQuota["requests.cpu"] = resource.MustParse("64")
	limitRange := func(max string) *corev1.LimitRange {
		return &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "evalsi-tenant", Namespace: "team-x"}, Spec: corev1.LimitRangeSpec{
			Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{"cpu": resource.MustParse(max), "memory": resource.MustParse("8Gi")}}}}}
	}
	rebind := []byte(`{"metadata":{"labels":{"evals.si/project":"team-y"}}}`)
	_, rebindErr := p.CoreV1().Namespaces().Patch(ctx, "team-x", types.MergePatchType, rebind, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	_, unlabelErr := p.CoreV1().Namespaces().Patch(ctx, "team-x", types.MergePatchType, []byte(`{"metadata":{"labels":{"evals.si/tenant":null}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	_, sandboxLabel := p.CoreV1().Namespaces().Patch(ctx, "team-x", types.MergePatchType, []byte(`{"metadata":{"labels":{"sandbox.evals.si/bubblewrap":"allowed"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	_, sandboxOnCreate := p.CoreV1().Namespaces().Create(ctx, tenant("team-w", map[string]string{"evals.si/tenant": "true", "evals.si/project": "team-w", "sandbox.evals.si/bubblewrap": "allowed"}), dry)
	_, joinOther := p.CoreV1().Namespaces().Create(ctx, tenant("team-x-staging", map[string]string{"evals.si/tenant": "true", "evals.si/project": "team-a"}), dry)
	_, rbOther := p.RbacV1().RoleBindings("not-a-tenant").Create(ctx, binding("not-a-tenant", "evalsi-tenant-access"), dry)
	_, rbAdmin := p.RbacV1().RoleBindings("team-x").Create(ctx, binding("team-x", "evalsi-tenant-provisioner"), dry)
	rbDelete := p.RbacV1().RoleBindings("team-x").Delete(ctx, "team-admins", dryDelete)
	_, tokenErr := p.CoreV1().Secrets("team-x").Create(ctx, secret("team-x", "creds", corev1.SecretTypeServiceAccountToken, true), dry)
	_, unlabelledSecret := p.CoreV1().Secrets("team-x").Create(ctx, secret("team-x", "creds", corev1.SecretTypeOpaque, false), dry)
	_, overwriteTLS := p.CoreV1().Secrets("team-x").Update(ctx, secret("team-x", "evalsi-operator-tls", corev1.SecretTypeOpaque, true), metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	deleteTLS := p.CoreV1().Secrets("team-x").Delete(ctx, "evalsi-operator-tls", dryDelete)
	_, noProject := p.CoreV1().Namespaces().Create(ctx, tenant("team-z", map[string]string{"evals.si/tenant": "true"}), dry)
	deleteOther := p.CoreV1().Namespaces().Delete(ctx, "not-a-tenant", dryDelete)
	_, bigQuota := p.CoreV1().ResourceQuotas("team-x").Create(ctx, quota(overQuota), dry)
	_, bigLimits := p.CoreV1().LimitRanges("team-x").Create(ctx, limitRange("32"), dry)
	scoped := quota(withinQuota)
	scoped.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{
		{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"never-used"}}}}
	_, scopedQuota := p.CoreV1().ResourceQuotas("team-x").Create(ctx, scoped, dry)
	// Before its quota, the tenant namespace runs no pool, whoever writes it.
	evaluator := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": "judge", "namespace": "team-x"}, "spec": map[string]any{}}}
	// The upgrade above made this policy beside the tenant policy seen in force: each comes into
	// force on its own, so it is given the time to.
	clustertest.Eventually(t, ctx, "an Evaluator in a tenant namespace without its quota denied by evalsi-tenant-quota-required", func() error {
		_, noQuota := env.Dynamic().Resource(evalsi("evaluators")).Namespace("team-x").Create(ctx, evaluator, dry)
		if noQuota == nil || !strings.Contains(noQuota.Error(), "evalsi-tenant-quota-required") {
			return fmt.Errorf("admitted or refused otherwise: %v", noQuota)
		}
		return nil
	})
	for what, err := range map[string]error{
		"a namespace without a project binding":           noProject,
		"rebinding a tenant namespace":                    rebindErr,
		"removing a tenant label":                         unlabelErr,
		"a sandbox.evals.si label on a tenant namespace":  sandboxLabel,
		"a sandbox.evals.si label on a new namespace":     sandboxOnCreate,
		"a new namespace joining another team's project":  joinOther,
		"a RoleBinding outside tenant namespaces":         rbOther,
		"binding another role":                            rbAdmin,
		"deleting the team's own RoleBinding":             rbDelete,
		"a service-account token Secret":                  tokenErr,
		"a Secret without the provisioned label":          unlabelledSecret,
		"overwriting the operator's TLS Secret":           overwriteTLS,
		"deleting the operator's TLS Secret":              deleteTLS,
		"deleting a namespace that is not a tenant's":     deleteOther,
		"a quota above tenantProvisioner.quota":           bigQuota,
		"a LimitRange above tenantProvisioner.limitRange": bigLimits,
		"a quota with scopes (counting only some pods)":   scopedQuota,
	} {
		// The binding policy refuses some of these before the provisioner's own does.
		if err == nil || !strings.Contains(err.Error(), "tenant provisioner") && !strings.Contains(err.Error(), "only the project binders") {
			t.Errorf("%s: %v, want a denial by the tenant or the binding policy", what, err)
		}
	}
	_, rbOK := p.RbacV1().RoleBindings("team-x").Create(ctx, binding("team-x", "evalsi-tenant-access"), dry)
	_, secretOK := p.CoreV1().Secrets("team-x").Create(ctx, secret("team-x", "creds", corev1.SecretTypeOpaque, true), dry)
	_, quotaOK := p.CoreV1().ResourceQuotas("team-x").Create(ctx, quota(withinQuota), dry)
	_, limitsOK := p.CoreV1().LimitRanges("team-x").Create(ctx, limitRange("4"), dry)
	for what, err := range map[string]error{
		"granting the tenant role in a tenant namespace": rbOK,
		"a labelled Secret in a tenant namespace":        secretOK,
		"a quota within tenantProvisioner.quota":         quotaOK,
		"a LimitRange within its bound":                  limitsOK,
	} {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	// A quota of that name that counts only some pods (an administrator's, past the
	// provisioner's policy) is no cap: pools are still refused.
	if _, err := admin.CoreV1().ResourceQuotas("team-x").Create(ctx, scoped, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "an Evaluator refused under a scoped quota", func() error {
		_, err := env.Dynamic().Resource(evalsi("evaluators")).Namespace("team-x").Create(ctx, evaluator, dry)
		if err == nil || !strings.Contains(err.Error(), "counts every pod") {
			return fmt.Errorf("%v", err)
		}
		return nil
	})
	if err := admin.CoreV1().ResourceQuotas("team-x").Delete(ctx, "evalsi-tenant", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CoreV1().ResourceQuotas("team-x").Create(ctx, quota(withinQuota), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the provisioner making the tenant's quota: %v", err)
	}
	clustertest.Eventually(t, ctx, "an Evaluator admitted once the tenant's quota is in place", func() error {
		_, err := env.Dynamic().Resource(evalsi("evaluators")).Namespace("team-x").Create(ctx, evaluator, dry)
		return err
	})
	// It holds no Secret reads: not the operator's TLS Secret in a tenant namespace, not the
	// webhook's CA key in the platform's.
	for _, at := range [][2]string{{"team-x", "evalsi-operator-tls"}, {"evalsi-system", "evalsi-webhook-ca"}} {
		if _, err := p.CoreV1().Secrets(at[0]).Get(ctx, at[1], metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the provisioner reading Secret %s/%s: %v, want Forbidden", at[0], at[1], err)
		}
	}
}

// TestProjectBindingIsGuarded impersonates a GitOps tool that RBAC lets create and label
// Namespaces: it cannot bind a namespace to a project, change or remove a binding, or set the
// labels SandboxClasses admit namespaces by; its other labels are its own, and a project binder
// (the cluster administrator) binds as before.
func TestProjectBindingIsGuarded(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	installCRDsChart(t)
	admin := env.Clientset()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gitops-namespaces"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces", "namespaces/status", "namespaces/finalize"}, Verbs: []string{"get", "create", "update", "patch"}}}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gitops-namespaces"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "gitops-namespaces"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "gitops"}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bound-b",
		Labels: map[string]string{"evals.si/project": "team-b"}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "gitops", Groups: []string{"system:authenticated"}}
	gitops := kubernetes.NewForConfigOrDie(cfg)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	patch := func(body string) error {
		_, err := gitops.CoreV1().Namespaces().Patch(ctx, "bound-b", types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// Through a subresource: the status and finalize updates keep the labels they send.
	sub := func(subresource string) error {
		ns, err := gitops.CoreV1().Namespaces().Get(ctx, "bound-b", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ns.Labels["evals.si/project"] = "team-a"
		opts := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
		if subresource == "status" {
			_, err = gitops.CoreV1().Namespaces().UpdateStatus(ctx, ns, opts)
		} else {
			_, err = gitops.CoreV1().Namespaces().Finalize(ctx, ns, opts)
		}
		return err
	}
	const denied = "only the project binders"
	clustertest.Eventually(t, ctx, "the binding policy in force", func() error {
		if err := patch(`{"metadata":{"labels":{"evals.si/project":"team-a"}}}`); err == nil || !strings.Contains(err.Error(), denied) {
			return fmt.Errorf("rebinding gave %v", err)
		}
		return nil
	})
	_, created := gitops.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gitops-ns",
		Labels: map[string]string{"evals.si/project": "team-a"}}}, dry)
	for what, err := range map[string]error{
		"creating a namespace bound to a project": created,
		"rebinding a namespace":                   patch(`{"metadata":{"labels":{"evals.si/project":"team-a"}}}`),
		"removing a binding":                      patch(`{"metadata":{"labels":{"evals.si/project":null}}}`),
		"admitting a namespace to a SandboxClass": patch(`{"metadata":{"labels":{"sandbox.evals.si/bubblewrap":"allowed"}}}`),
		"opening a key to a namespace's runs":     patch(`{"metadata":{"labels":{"run-key.evals.si/OPENAI_API_KEY":"allowed"}}}`),
		"rebinding through namespaces/status":     sub("status"),
		"rebinding through namespaces/finalize":   sub("finalize"),
	} {
		if err == nil || !strings.Contains(err.Error(), denied) {
			t.Errorf("%s: %v, want a denial by evalsi-project-bindings", what, err)
		}
	}
	if err := patch(`{"metadata":{"labels":{"team":"b"}}}`); err != nil {
		t.Errorf("another label: %v", err)
	}
	if _, err := admin.CoreV1().Namespaces().Patch(ctx, "bound-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"evals.si/project":"team-a"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the cluster administrator rebinding: %v", err)
	}
}

// TestCreatorRecordedWhateverTheSpecsShape installs evalsi-crds with the webhook disabled and
// creates (dryRun=All) objects whose spec fields have the wrong shape: a string where an object
// or a list belongs, a list where an object does. The CRDs' schemas describe those fields (for
// kubectl explain) but give objects and lists no type, so the created-by policy, which applies
// its patch to the object as the schema types it, records the creator of each, and judging the
// spec is left to validation (the webhook's, the operator's InvalidSpec), which names the field.
// Typed objects and lists failed here: "failed to convert original object to typed object".
func TestCreatorRecordedWhateverTheSpecsShape(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	installCRDsChart(t)
	ns := "creator-shapes"
	activeNamespace(t, ctx, ns, nil)
	sources := env.Dynamic().Resource(evalsi("tracesources")).Namespace(ns)
	clustertest.Eventually(t, ctx, "the created-by policy in force", func() error {
		got, err := sources.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "TraceSource",
			"metadata": map[string]any{"name": "in-force"}, "spec": map[string]any{"type": "otlp"}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if got.GetAnnotations()["evals.si/created-by"] == "" {
			return fmt.Errorf("no creator recorded yet")
		}
		return nil
	})
	for name, tc := range map[string]struct {
		kind, resource string
		spec           map[string]any
	}{
		"a target that is a string":       {"EvalRun", "evalruns", map[string]any{"suite": "smoke", "target": "https://model.example/v1"}},
		"evaluators that are a string":    {"EvalRun", "evalruns", map[string]any{"suite": "smoke", "target": map[string]any{"checkpointServer": "s"}, "evaluators": "judge"}},
		"an endpoint that is a list":      {"EvalRun", "evalruns", map[string]any{"suite": "smoke", "target": map[string]any{"endpoint": []any{"u"}}}},
		"autoscaling that is a number":    {"Evaluator", "evaluators", map[string]any{"autoscaling": int64(5)}},
		"env that is an object":           {"Evaluator", "evaluators", map[string]any{"env": map[string]any{"A": "b"}}},
		"lora that is a boolean":          {"CheckpointServer", "checkpointservers", map[string]any{"model": "org/m", "lora": true}},
		"alerts that are an object":       {"OnlineEvalPolicy", "onlineevalpolicies", map[string]any{"traceSource": "t", "samplingRate": 0.5, "evaluators": []any{"e"}, "alerts": map[string]any{"x": int64(1)}}},
		"settings that are a list":        {"TraceSource", "tracesources", map[string]any{"type": "otlp", "settings": []any{"a"}}},
		"allowedNamespaces that are text": {"SandboxClass", "sandboxclasses", map[string]any{"rung": "landlock", "allowedNamespaces": "all"}},
	} {
		t.Run(name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": tc.kind,
				"metadata": map[string]any{"name": "shape"}, "spec": tc.spec}}
			ri := env.Dynamic().Resource(evalsi(tc.resource))
			var err error
			var got *unstructured.Unstructured
			if tc.kind == "SandboxClass" {
				got, err = ri.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			} else {
				got, err = ri.Namespace(ns).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			}
			if err != nil {
				t.Fatalf("refused before validation: %v", err)
			}
			if got.GetAnnotations()["evals.si/created-by"] == "" {
				t.Errorf("no creator recorded: %v", got.GetAnnotations())
			}
		})
	}
}
