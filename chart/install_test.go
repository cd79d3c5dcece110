package chart_test

import (
	"context"
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

	"evals.si/operator/apiclient/evalsid"
	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/internal/manifest"
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
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
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
			return fmt.Sprintf("%v/%v", m["status"], m["reason"])
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
	for release, want := range map[string]string{
		helm(t, "install", "evalsi", "evalsi", "-n", "team-a", "--create-namespace", kc):    "kubectl -n team-a rollout status deployment/evalsi-operator",
		helm(t, "install", "evalsi-sandboxd", "evalsi-sandboxd", "-n", "evalsi-system", kc): "Uninstalling this chart leaves the namespace evalsi-sandbox",
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
	stopOperator := startOperator(t, bin, opKubeconfig, "--namespace=team-a",
		"--controllers=evalrun,onlineevalpolicy,tracesource,evaluator,checkpointserver",
		"--leader-elect", "--leader-election-namespace=team-a",
		"--api-url=http://"+l.Addr().String(), "--api-token-file="+tokenFile, "--run-poll-interval=1s")
	_, sbKubeconfig := clustertest.TokenKubeconfig(t, ctx, env, "evalsi-system", "evalsi-sandboxd")
	startOperator(t, bin, sbKubeconfig, "--controllers=sandboxclass", "--sandbox-namespace=evalsi-sandbox",
		"--leader-elect", "--leader-election-namespace=evalsi-system", "--leader-election-id=evalsi-sandboxd")

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

	// The chart's operator identity is denied outside its namespace.
	op := dynamic.NewForConfigOrDie(opCfg)
	if _, err := op.Resource(deploymentsGVR).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Deployments in default as the operator: %v, want Forbidden", err)
	}
	if _, err := op.Resource(evalsi("evaluators")).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Evaluators cluster-wide as the operator: %v, want Forbidden", err)
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
	if err := admin.Resource(evalsi("evalruns")).Namespace("team-a").Delete(ctx, "step-900-smoke", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "EvalRun deleted without the operator", func() error {
		if _, err := admin.Resource(evalsi("evalruns")).Namespace("team-a").Get(ctx, "step-900-smoke", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})

	// Uninstalling evalsi-sandboxd leaves the shared sandbox namespace, and it can be installed
	// again at once.
	helm(t, "uninstall", "evalsi-sandboxd", "-n", "evalsi-system", kc)
	sandbox, err := env.Clientset().CoreV1().Namespaces().Get(ctx, "evalsi-sandbox", metav1.GetOptions{})
	if err != nil || sandbox.DeletionTimestamp != nil {
		t.Errorf("the sandbox namespace after uninstalling evalsi-sandboxd: %v, deleting=%v", err, err == nil && sandbox.DeletionTimestamp != nil)
	}
	helm(t, "install", "evalsi-sandboxd", "evalsi-sandboxd", "-n", "evalsi-system", kc)
	helm(t, "uninstall", "evalsi-sandboxd", "-n", "evalsi-system", kc)
	// Uninstalling evalsi-crds keeps the CRDs and so the resources.
	helm(t, "uninstall", "evalsi-crds", "-n", "evalsi-system", kc)
	if _, err := admin.Resource(evalsi("onlineevalpolicies")).Namespace("team-a").Get(ctx, "team-a-toxicity", metav1.GetOptions{}); err != nil {
		t.Errorf("OnlineEvalPolicy after uninstalling evalsi-crds: %v", err)
	}
}

// TestPolicyHoldsOperatorServiceAccounts impersonates an evalsi-operator service account that
// RBAC allows to write and delete Deployments, Secrets and Services, so that only the
// ValidatingAdmissionPolicy stands between it and what the policy forbids: objects not labelled
// managed-by: evalsi (create, update, delete), and, outside the sandbox namespace, pods that are
// privileged, add capabilities or run without the RuntimeDefault seccomp profile.
func TestPolicyHoldsOperatorServiceAccounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	installCRDsChart(t)
	cs := env.Clientset()
	ns, sandbox := "vap-test", "evalsi-sandbox"
	operator := "system:serviceaccount:" + ns + ":evalsi-operator"
	for _, n := range []string{ns, sandbox} {
		// An earlier test's uninstall may still be deleting the sandbox namespace.
		clustertest.Eventually(t, ctx, "namespace "+n+" active", func() error {
			got, err := cs.CoreV1().Namespaces().Create(ctx, namespace(n), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				got, err = cs.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
			}
			if err == nil && got.Status.Phase == corev1.NamespaceTerminating {
				err = fmt.Errorf("terminating")
			}
			return err
		})
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: n}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"secrets", "services"}, Verbs: []string{"create", "delete"}},
		}}
		if _, err := cs.RbacV1().Roles(n).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		for _, user := range []string{operator, "platform-admin"} {
			rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "writer-" + strings.ReplaceAll(user, ":", "-"), Namespace: n},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "writer"},
				Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
			if _, err := cs.RbacV1().RoleBindings(n).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
	as := func(user string) dynamic.Interface {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
		return dynamic.NewForConfigOrDie(cfg)
	}
	op, other := as(operator), as("platform-admin")
	labelled := map[string]any{"app.kubernetes.io/managed-by": "evalsi"}
	// deploy is a Deployment whose one container has securityContext sc (nil: the operator's
	// own restricted settings) and whose pod has seccomp RuntimeDefault unless noSeccomp.
	deploy := func(name string, labels map[string]any, sc map[string]any, noSeccomp bool) *unstructured.Unstructured {
		meta := map[string]any{"name": name}
		if labels != nil {
			meta["labels"] = labels
		}
		if sc == nil {
			sc = map[string]any{"allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"ALL"}}}
		}
		pod := map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x", "securityContext": sc}}}
		if !noSeccomp {
			pod["securityContext"] = map[string]any{"seccompProfile": map[string]any{"type": "RuntimeDefault"}}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
			"spec": map[string]any{
				"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": name}}, "spec": pod},
			},
		}}
	}
	privileged := map[string]any{"privileged": true}
	addsCaps := map[string]any{"allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"ALL"}, "add": []any{"NET_ADMIN"}}}
	escalates := map[string]any{"capabilities": map[string]any{"drop": []any{"ALL"}}}
	tokenSecret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
		"metadata": map[string]any{"name": "sa-token", "labels": labelled,
			"annotations": map[string]any{"kubernetes.io/service-account.name": "default"}},
	}}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	services := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// In force once the policy (not RBAC, whose new bindings take a moment) refuses a probe.
	clustertest.Eventually(t, ctx, "policy in force", func() error {
		_, err := op.Resource(deploymentsGVR).Namespace(ns).Create(ctx, deploy("probe", nil, nil, false), dry)
		if err == nil || !strings.Contains(err.Error(), "evalsi-operator-limits") {
			return fmt.Errorf("a probe gave %v", err)
		}
		return nil
	})
	// Objects that someone else made, without the label, for the operator to try to delete or take.
	theirs := map[schema.GroupVersionResource]*unstructured.Unstructured{
		deploymentsGVR: deploy("theirs", nil, nil, false),
		secrets:        {Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "theirs"}}},
		services: {Object: map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "theirs"},
			"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}}},
	}
	for gvr, obj := range theirs {
		if _, err := other.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	del := func(gvr schema.GroupVersionResource) error {
		return op.Resource(gvr).Namespace(ns).Delete(ctx, "theirs", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
	_, hijack := op.Resource(deploymentsGVR).Namespace(ns).Patch(ctx, "theirs", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"evalsi"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	const unlabelled = "creates, updates and deletes only objects labelled app.kubernetes.io/managed-by: evalsi"
	for _, c := range []struct {
		what string
		err  error
		want string
	}{
		{"unlabelled Deployment", create(ctx, op, deploymentsGVR, ns, deploy("plain", nil, nil, false)), unlabelled},
		{"deleting an unlabelled Deployment", del(deploymentsGVR), unlabelled},
		{"deleting an unlabelled Secret", del(secrets), unlabelled},
		{"deleting an unlabelled Service", del(services), unlabelled},
		{"labelling someone else's Deployment", hijack, unlabelled},
		{"privileged pod template", create(ctx, op, deploymentsGVR, ns, deploy("priv", labelled, privileged, false)), "runs no privileged container outside the sandbox namespace"},
		{"added capabilities", create(ctx, op, deploymentsGVR, ns, deploy("caps", labelled, addsCaps, false)), "drop ALL capabilities and add none"},
		{"privilege escalation", create(ctx, op, deploymentsGVR, ns, deploy("esc", labelled, escalates, false)), "allowPrivilegeEscalation: false"},
		{"no seccomp profile", create(ctx, op, deploymentsGVR, ns, deploy("seccomp", labelled, nil, true)), "RuntimeDefault seccomp profile"},
		{"service-account token Secret", create(ctx, op, secrets, ns, tokenSecret), "makes no service-account token Secrets"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want denial with %q", c.what, c.err, c.want)
		}
	}
	for what, err := range map[string]error{
		"labelled, restricted Deployment":            create(ctx, op, deploymentsGVR, ns, deploy("good", labelled, nil, false)),
		"added capabilities in the sandbox":          create(ctx, op, deploymentsGVR, sandbox, deploy("caps", labelled, addsCaps, false)),
		"no seccomp profile in the sandbox":          create(ctx, op, deploymentsGVR, sandbox, deploy("seccomp", labelled, privileged, true)),
		"another user's unlabelled privileged pod":   create(ctx, other, deploymentsGVR, ns, deploy("someone-else", nil, privileged, true)),
		"another user deleting an unlabelled Secret": other.Resource(secrets).Namespace(ns).Delete(ctx, "theirs", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}),
	} {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
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
	if _, err := cs.CoreV1().Namespaces().Create(ctx, namespace(ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
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

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// installCRDsChart installs (or upgrades) the evalsi-crds release, without the webhook, whose
// pods cannot run on KWOK nodes (admission is tested in package webhook).
func installCRDsChart(t *testing.T) {
	needCluster(t)
	helm(t, "upgrade", "--install", "evalsi-crds", "evalsi-crds", "-n", "evalsi-system", "--create-namespace",
		"--kubeconfig="+env.Kubeconfig, "--set", "webhook.enabled=false")
}
