package chart_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsid"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/reconcile/process"
	"evals.si/operator/shard/holding"
)

var env *cluster.Cluster

// shared is the package's control plane, started by the first test that calls needCluster: the
// lint and golden tests start no process.
var shared = clustertest.New(cluster.Options{Nodes: 1, NodeCapacity: map[string]string{"nvidia.com/gpu": "8"}})

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// needCluster starts the package's control plane if it has not started yet, and sets env.
func needCluster(t testing.TB) { env = shared.Get(t) }

func evalsi(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "evals.si", Version: "v1alpha1", Resource: resource}
}

var deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// startOperator runs the operator binary as a process until the test ends or stop is called.
func startOperator(t *testing.T, bin, kubeconfig string, args ...string) (stop func()) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logs, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"run", "--kubeconfig=" + kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--discovery-interval=1s"}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			clustertest.Interrupt(t, "the operator", cmd)
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("operator log:\n%s", out)
		}
	})
	return stop
}

func readyOf(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" {
			return fmt.Sprintf("%v/%v: %v", m["status"], m["reason"], m["message"])
		}
	}
	return "none"
}

// TestChartsOnTheControlPlane installs the three charts, runs the operators as processes with
// tokens of the charts' own service accounts (no admin credentials), and checks that they
// reconcile the examples in their namespaces and nothing outside.
func TestChartsOnTheControlPlane(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := env.InstallKedaCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	kc := "--kubeconfig=" + env.Kubeconfig
	installCRDsChart(t)
	// The sandbox pools' cluster-scoped part comes with an upgrade of evalsi-crds, once its CRDs
	// are served (the SandboxClasses are objects of one).
	helm(t, "upgrade", "evalsi-crds", "evalsi-crds", "-n", "evalsi-system", "--reuse-values", "--set", "sandboxd.enabled=true", kc)
	for release, want := range map[string]string{
		// Two shards: the chart's RBAC names their Leases, which the three replicas below share.
		helm(t, "install", "evalsi", "evalsi", "-n", "team-a", "--create-namespace", "--set", "api.url=https://evalsid.evalsi-platform.svc", "--set", "operator.shards=2", kc): "kubectl -n team-a rollout status deployment/evalsi-operator",
		helm(t, "install", "evalsi-sandboxd", "evalsi-sandboxd", "-n", "evalsi-sandbox", "--set", "operator.apiURL=https://evalsid.evalsi-platform.svc", kc):                   "the sandbox operator runs in evalsi-sandbox",
	} {
		if !strings.Contains(release, "NOTES:") || !strings.Contains(release, want) {
			t.Errorf("install notes lack %q:\n%s", want, release)
		}
	}

	// The reference evalsid on loopback, accepting the cluster's tokens for the chart's audience
	// (as the chart's evalsid does), and the operator's projected token for that audience.
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	api := evalsid.New(nil, evalsid.DefaultSchedule)
	api.TrustKubernetes(&evalsid.KubernetesIssuer{APIServer: env.Config.Host, Client: hc, Audience: "evalsi"})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go api.Serve(ctx, l)
	tr, err := env.Clientset().CoreV1().ServiceAccounts("team-a").CreateToken(ctx, "evalsi-operator", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"evalsi"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}

	bin := clustertest.Operator(t)
	opCfg, opKubeconfig := clustertest.TokenKubeconfig(t, ctx, env, "team-a", "evalsi-operator")
	// Three replicas over two shards, as the chart's identity (its RBAC, not an admin's): two
	// hold a shard each, the third stands by.
	var replicas []func()
	for range 3 {
		replicas = append(replicas, startOperator(t, bin, opKubeconfig, "--namespace=team-a",
			"--controllers=evalrun,onlineevalpolicy,tracesource,evaluator,checkpointserver",
			"--leader-elect", "--leader-election-namespace=team-a", "--shards=2",
			"--api-url=http://"+l.Addr().String(), "--api-token-file="+tokenFile, "--run-poll-interval=1s"))
	}
	stopOperator := func() {
		for _, stop := range replicas {
			stop()
		}
	}
	_, sbKubeconfig := clustertest.TokenKubeconfig(t, ctx, env, "evalsi-sandbox", "evalsi-sandboxd")
	startOperator(t, bin, sbKubeconfig, "--controllers=sandboxclass", "--sandbox-namespace=evalsi-sandbox",
		"--leader-elect", "--leader-election-namespace=evalsi-sandbox", "--leader-election-id=evalsi-sandboxd")

	// The chart's classes admit no namespace until a project binder labels it in (the install
	// guide does the same); the examples run in landlock.
	if _, err := env.Clientset().CoreV1().Namespaces().Patch(ctx, "team-a", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"sandbox.evals.si/landlock":"allowed"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// A user applies the examples of team-a.
	docs, err := manifest.Read("../testdata/examples", nil)
	if err != nil {
		t.Fatal(err)
	}
	admin := env.Dynamic()
	var mine []*unstructured.Unstructured
	for _, d := range docs {
		o := d.Object
		if o.GetNamespace() != "team-a" {
			continue
		}
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
		if o.GroupVersionKind().Group == "evals.si" {
			gvr = evalsi(strings.ToLower(o.GetKind()) + "s")
			if o.GetKind() == "OnlineEvalPolicy" {
				gvr = evalsi("onlineevalpolicies")
			}
			mine = append(mine, o)
		}
		if _, err := admin.Resource(gvr).Namespace("team-a").Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", d.Where(), err)
		}
	}
	for _, o := range mine {
		gvr := evalsi(strings.ToLower(o.GetKind()) + "s")
		if o.GetKind() == "OnlineEvalPolicy" {
			gvr = evalsi("onlineevalpolicies")
		}
		clustertest.Eventually(t, ctx, o.GetKind()+" "+o.GetName()+" Ready", func() error {
			got, err := admin.Resource(gvr).Namespace("team-a").Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if r := readyOf(got); !strings.HasPrefix(r, "True/") {
				return fmt.Errorf("Ready %s", r)
			}
			return nil
		})
	}
	for _, name := range []string{"pod", "landlock", "bubblewrap"} {
		clustertest.Eventually(t, ctx, "SandboxClass "+name+" Ready", func() error {
			got, err := admin.Resource(evalsi("sandboxclasses")).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if r := readyOf(got); !strings.HasPrefix(r, "True/") {
				return fmt.Errorf("Ready %s", r)
			}
			return nil
		})
	}

	clustertest.Eventually(t, ctx, "each replica holds a shard", func() error {
		holders := map[string]bool{}
		for _, name := range []string{"evalsi-operator-shard-0", "evalsi-operator-shard-1"} {
			l, err := env.Clientset().CoordinationV1().Leases("team-a").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			holders[holding.LeaseHolder(l, time.Now())] = true
		}
		if delete(holders, ""); len(holders) != 2 {
			return fmt.Errorf("the shards' holders: %v", holders)
		}
		return nil
	})
	clustertest.Eventually(t, ctx, "the third replica holding the standby Lease", func() error {
		l, err := env.Clientset().CoordinationV1().Leases("team-a").Get(ctx, process.StandbyLease("evalsi-operator"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if holding.LeaseHolder(l, time.Now()) == "" {
			return errors.New("held by no one")
		}
		return nil
	})

	// The chart's operator identity is denied outside its namespace.
	op := dynamic.NewForConfigOrDie(opCfg)
	if _, err := op.Resource(deploymentsGVR).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Deployments in default as the operator: %v, want Forbidden", err)
	}
	if _, err := op.Resource(evalsi("evaluators")).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Evaluators cluster-wide as the operator: %v, want Forbidden", err)
	}
	// It lists its own namespace's Leases (a replica reads every shard's), and no other's.
	leases := schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	if _, err := op.Resource(leases).Namespace("team-a").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing Leases in its namespace as the operator: %v", err)
	}
	if _, err := op.Resource(leases).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Leases in default as the operator: %v, want Forbidden", err)
	}

	// Uninstalling evalsi with resources present leaves nothing to get stuck: the operator
	// stops (its Deployment goes), the post-delete hook releases the finalizers.
	stopOperator()
	(&clustertest.Kubelet{Bin: bin, Jobs: []string{"team-a/evalsi-release-finalizers"}}).Start(t, ctx, env)
	helm(t, "uninstall", "evalsi", "-n", "team-a", "--timeout=3m", kc)
	for _, o := range mine {
		gvr := evalsi(strings.ToLower(o.GetKind()) + "s")
		if o.GetKind() == "OnlineEvalPolicy" {
			gvr = evalsi("onlineevalpolicies")
		}
		got, err := admin.Resource(gvr).Namespace("team-a").Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s %s after uninstall: %v", o.GetKind(), o.GetName(), err)
		}
		if f := got.GetFinalizers(); len(f) != 0 {
			t.Errorf("%s %s keeps finalizers %v after uninstall", o.GetKind(), o.GetName(), f)
		}
	}
	// Nor do the Leases the three replicas wrote over two shards.
	if l, err := env.Clientset().CoordinationV1().Leases("team-a").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		var names []string
		if err == nil {
			for _, o := range l.Items {
				names = append(names, o.Name)
			}
		}
		t.Errorf("Leases in team-a after uninstall: %v %v, want none", names, err)
	}
	if err := admin.Resource(evalsi("evalruns")).Namespace("team-a").Delete(ctx, "step-900-smoke", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "EvalRun deleted without the operator", func() error {
		if _, err := admin.Resource(evalsi("evalruns")).Namespace("team-a").Get(ctx, "step-900-smoke", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})

	// Uninstalling evalsi-sandboxd leaves the shared sandbox namespace (evalsi-crds's), and it
	// can be installed again at once.
	helm(t, "uninstall", "evalsi-sandboxd", "-n", "evalsi-sandbox", kc)
	sandbox, err := env.Clientset().CoreV1().Namespaces().Get(ctx, "evalsi-sandbox", metav1.GetOptions{})
	if err != nil || sandbox.DeletionTimestamp != nil {
		t.Errorf("the sandbox namespace after uninstalling evalsi-sandboxd: %v, deleting=%v", err, err == nil && sandbox.DeletionTimestamp != nil)
	}
	helm(t, "install", "evalsi-sandboxd", "evalsi-sandboxd", "-n", "evalsi-sandbox", "--set", "operator.apiURL=https://evalsid.evalsi-platform.svc", kc)
	helm(t, "uninstall", "evalsi-sandboxd", "-n", "evalsi-sandbox", kc)
	// Uninstalling evalsi-crds keeps the CRDs and so the resources.
	helm(t, "uninstall", "evalsi-crds", "-n", "evalsi-system", kc)
	if _, err := admin.Resource(evalsi("onlineevalpolicies")).Namespace("team-a").Get(ctx, "team-a-toxicity", metav1.GetOptions{}); err != nil {
		t.Errorf("OnlineEvalPolicy after uninstalling evalsi-crds: %v", err)
	}
}

func create(ctx context.Context, c dynamic.Interface, gvr schema.GroupVersionResource, ns string, obj *unstructured.Unstructured) error {
	_, err := c.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// TestAggregatedRoles checks what edit and view grant on the evalsi kinds.
func TestAggregatedRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	installCRDsChart(t)
	cs := env.Clientset()
	ns := "team-roles"
	activeNamespace(t, ctx, ns, nil)
	for user, role := range map[string]string{"alice": "edit", "bob": "view"} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		user, verb, resource, subresource, namespace string
		allowed                                      bool
	}{
		{"alice", "create", "checkpointservers", "", ns, true},
		{"alice", "create", "evalruns", "", ns, true},
		{"alice", "delete", "onlineevalpolicies", "", ns, true},
		{"alice", "get", "evalruns", "status", ns, true},
		{"alice", "create", "sandboxclasses", "", "", false},
		{"alice", "update", "evalruns", "status", ns, false},
		{"bob", "get", "evalruns", "", ns, true},
		{"bob", "list", "checkpointservers", "", ns, true},
		{"bob", "get", "evaluators", "status", ns, true},
		{"bob", "create", "evalruns", "", ns, false},
		{"bob", "patch", "tracesources", "", ns, false},
	} {
		clustertest.Eventually(t, ctx, fmt.Sprintf("%s %s %s/%s allowed=%v", c.user, c.verb, c.resource, c.subresource, c.allowed), func() error {
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: c.user, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: c.namespace, Verb: c.verb, Group: "evals.si", Resource: c.resource, Subresource: c.subresource,
				},
			}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if sar.Status.Allowed != c.allowed {
				return fmt.Errorf("allowed=%v (%s)", sar.Status.Allowed, sar.Status.Reason)
			}
			return nil
		})
	}
}

// TestKindHelperRoles grants one kind at a time with the helper roles (rbac.helpers.enabled),
// impersonating the users they are bound to on the real API server: an Evaluator editor writes
// Evaluators and nothing else; its imaged Evaluator is still refused without the right to create
// pods; a viewer reads and writes nothing; a CheckpointServer admin may delete collections.
func TestKindHelperRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	needCluster(t)
	helm(t, "upgrade", "--install", "evalsi-crds", "evalsi-crds", "-n", "evalsi-system", "--create-namespace",
		"--kubeconfig="+env.Kubeconfig, "--set", "webhook.enabled=false", "--set", "rbac.helpers.enabled=true")
	t.Cleanup(func() { installCRDsChart(t) })
	cs := env.Clientset()
	ns := "team-helpers"
	activeNamespace(t, ctx, ns, nil)
	for user, role := range map[string]string{"erin": "evalsi-evaluator-editor", "vic": "evalsi-evalrun-viewer", "ada": "evalsi-checkpointserver-admin"} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	evaluator := func(spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
			"metadata": map[string]any{"name": "judge"}, "spec": spec}}
	}
	run := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
		"metadata": map[string]any{"name": "r"}, "spec": map[string]any{"suite": "smoke",
			"target": map[string]any{"endpoint": map[string]any{"url": "http://model:8000/v1", "model": "m"}}}}}
	erin, vic := impersonate("erin"), impersonate("vic")
	clustertest.Eventually(t, ctx, "erin, an Evaluator editor, creates an Evaluator", func() error {
		return create(ctx, erin, evalsi("evaluators"), ns, evaluator(map[string]any{}))
	})
	// The chart's references policy is judged below: first see it in force (an upgrade's new
	// policy reaches the API server's admission a moment after helm returns), by a refusal of
	// its other rule, an account of erin's choosing.
	clustertest.Eventually(t, ctx, "the references policy refusing erin's Evaluator of an account of her choosing", func() error {
		err := create(ctx, erin, evalsi("evaluators"), ns, evaluator(map[string]any{"serviceAccountName": "judge"}))
		if err == nil || !strings.Contains(err.Error(), "spec.serviceAccountName runs the pool as a service account of its writer's choosing") {
			return fmt.Errorf("admitted or refused otherwise: %v", err)
		}
		return nil
	})
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"erin creating an EvalRun":                    {create(ctx, erin, evalsi("evalruns"), ns, run), "forbidden"},
		"erin creating an Evaluator of her image":     {create(ctx, erin, evalsi("evaluators"), ns, evaluator(map[string]any{"image": "registry.example/judge:1"})), "create pods"},
		"vic, an EvalRun viewer, creating an EvalRun": {create(ctx, vic, evalsi("evalruns"), ns, run), "forbidden"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal saying %q", name, tc.err, tc.want)
		}
	}
	if _, err := vic.Resource(evalsi("evalruns")).Namespace(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("vic listing EvalRuns: %v", err)
	}
	if _, err := vic.Resource(evalsi("evaluators")).Namespace(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("vic listing Evaluators: %v, want Forbidden", err)
	}
	err := impersonate("ada").Resource(evalsi("checkpointservers")).Namespace(ns).DeleteCollection(ctx,
		metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}, metav1.ListOptions{})
	if err != nil {
		t.Errorf("ada, a CheckpointServer admin, deleting every CheckpointServer: %v", err)
	}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// installCRDsChart installs (or upgrades) the evalsi-crds release, without the webhook, whose
// pods cannot run on KWOK nodes (admission is tested in package webhook). It returns once the
// API server admits a new SandboxClass (a dry run): until its type reaches the API server's
// admission policies, a create of one is refused ("Resource kind evals.si/v1alpha1,
// Kind=SandboxClass not found. There can be a delay between when CustomResourceDefinitions are
// created and when they are available"), the upgrade that makes the SandboxClasses now and then.
func installCRDsChart(t *testing.T) {
	needCluster(t)
	helm(t, "upgrade", "--install", "evalsi-crds", "evalsi-crds", "-n", "evalsi-system", "--create-namespace",
		"--kubeconfig="+env.Kubeconfig, "--set", "webhook.enabled=false")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass",
		"metadata": map[string]any{"name": "admission-probe"},
		"spec":     map[string]any{"rung": "pod"},
	}}
	clustertest.Eventually(t, ctx, "a SandboxClass admitted", func() error {
		_, err := env.Dynamic().Resource(evalsi("sandboxclasses")).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}
