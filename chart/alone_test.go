package chart_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/internal/podproc"
	"evals.si/operator/isolation"
)

// TestEvalsiChartAlone installs the evalsi chart as ADR 0012 promises it for clusters where no
// cluster-admin step is possible: on a control plane without evalsi-crds, as a namespace's
// administrator (the built-in admin role bound in that namespace, no cluster rights), into a
// namespace that enforces Pod Security restricted. The install succeeds; every pod of every
// Deployment is admitted; the sandbox pool's isolation probe, run for real under the test
// kubelet on this machine's kernel, meets the landlock floor and says so in its termination
// message; the operator, played as the chart's own identity, says which kinds are off and why.
// When the platform installs evalsi-crds later, the operator says it may not watch the kinds
// yet, and once the administrator upgrades the chart (binding evalsi-crds's operator roles, which
// admin may bind), its controllers start. The uninstall, by the same administrator, leaves
// nothing in the namespace.
func TestEvalsiChartAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A control plane of its own: the package's shared one has evalsi-crds's CRDs.
	c := ownControlPlane(t, ctx)
	cs := c.Clientset()

	const ns, admin = "solo", "nora"
	activeNamespace(t, ctx, ns, map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
	})
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nora-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: admin}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A namespace administrator cannot make a quota: the platform bounds the namespace's GPUs
	// first, and the chart, finding that quota, makes none of its own.
	if _, err := cs.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "platform-gpus"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("1")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	asAdmin := []string{"-n", ns, "--kubeconfig=" + c.Kubeconfig, "--kube-as-user=" + admin, "--kube-as-group=system:authenticated"}

	bin := clustertest.Operator(t)
	kubelet := &clustertest.Kubelet{Bin: bin, Deployments: []string{ns + "/evalsi-operator"}, Jobs: []string{ns + "/evalsi-release-finalizers"}}
	kubelet.Start(t, ctx, c)
	helm(t, append([]string{"install", "evalsi", "evalsi", "--set", "referenceEvalsid.enabled=true",
		// No node takes the sandbox pool's pods, so that KWOK leaves their status to the test's
		// kubelet, which runs their probe.
		"--set", "sandbox.nodeSelector.evals\\.si/test-node=none"}, asAdmin...)...)

	// Every pod of every Deployment is admitted under restricted.
	deployments, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range deployments.Items {
		names = append(names, d.Name)
		clustertest.Eventually(t, ctx, "the pods of Deployment "+d.Name+" admitted", func() error {
			got, err := cs.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == "ReplicaFailure" && cond.Status == corev1.ConditionTrue {
					return fmt.Errorf("%s: %s", cond.Reason, cond.Message)
				}
			}
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(got.Spec.Selector)})
			if err != nil {
				return err
			}
			if want := int(*got.Spec.Replicas); len(pods.Items) != want {
				return fmt.Errorf("%d of %d pods", len(pods.Items), want)
			}
			return nil
		})
	}
	if want := "evalsi-operator evalsi-sandbox evalsid"; strings.Join(names, " ") != want {
		t.Errorf("Deployments %v, want %s", names, want)
	}

	// The sandbox pool's probe, run as the kubelet runs an init container.
	metadata, stop, err := podproc.SilentAddress()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatal("no sandbox pool pod to run the probe of")
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if err := kubelet.RunInitContainers(t, ctx, p, "--reach="+isolation.MetadataTarget+"="+metadata); err != nil {
			t.Fatal(err)
		}
		got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := got.Status.InitContainerStatuses
		if len(s) != 1 || s[0].State.Terminated == nil {
			t.Fatalf("pod %s: init containers %+v", p.Name, s)
		}
		var r isolation.Result
		if err := json.Unmarshal([]byte(s[0].State.Terminated.Message), &r); err != nil {
			t.Fatalf("pod %s: the probe's termination message %q: %v", p.Name, s[0].State.Terminated.Message, err)
		}
		if s[0].State.Terminated.ExitCode != 0 || len(r.Missing) > 0 || !strings.HasPrefix(r.Summary, "landlock ABI ") {
			t.Errorf("pod %s: the probe ended %d: %s (missing %q)", p.Name, s[0].State.Terminated.ExitCode, r.Summary, r.Missing)
		}
	}

	// The operator, as the chart's identity, says which kinds are off and why.
	kubelet.Settle(t, ctx)
	op := kubelet.Pod(ns + "/evalsi-operator")
	operatorSays(t, ctx, op, func(kind string) string {
		return `"msg":"controller off: its CRD is not served; it starts when the CRD is installed","controller":"` + kind + `"`
	})

	// The platform installs evalsi-crds later: the operator sees the kinds served but may not
	// watch them, and says so; the administrator upgrades the chart, which binds the operator's
	// roles (the right to bind them is what evalsi-crds gives admin), and the controllers start.
	helm(t, "install", "evalsi-crds", "evalsi-crds", "-n", "evalsi-system", "--create-namespace",
		"--kubeconfig="+c.Kubeconfig, "--set", "webhook.enabled=false")
	operatorSays(t, ctx, op, func(kind string) string {
		return `"msg":"controller off: its CRD is served, but this operator may not list ` + plurals[kind] + ` in namespace solo`
	})
	helm(t, append([]string{"upgrade", "evalsi", "evalsi", "--reuse-values"}, asAdmin...)...)
	operatorSays(t, ctx, op, func(kind string) string { return `"msg":"controller started","controller":"` + kind + `"` })

	// The administrator uninstalls it, and nothing of the release stays.
	helm(t, append([]string{"uninstall", "evalsi", "--timeout=2m"}, asAdmin...)...)
	clustertest.Eventually(t, ctx, "nothing of the release left", func() error {
		left, err := namespaceObjects(ctx, ns)
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
}

// plurals are the resources of the controllers the chart runs.
var plurals = map[string]string{"evalrun": "evalruns", "onlineevalpolicy": "onlineevalpolicies", "tracesource": "tracesources",
	"evaluator": "evaluators", "checkpointserver": "checkpointservers"}

// operatorSays waits until the played operator's log holds line(kind) for each of its controllers.
func operatorSays(t *testing.T, ctx context.Context, op *clustertest.Pod, line func(kind string) string) {
	t.Helper()
	clustertest.Eventually(t, ctx, "the operator saying "+line("<kind>"), func() error {
		out, err := os.ReadFile(op.Log)
		if err != nil {
			return err
		}
		for kind := range plurals {
			if !strings.Contains(string(out), line(kind)) {
				return fmt.Errorf("no word of %s in:\n%s", kind, out)
			}
		}
		return nil
	})
}

// namespaceObjects lists every object in ns of every resource the API server serves, but what
// the namespace holds before any install (its default ServiceAccount, its root CA ConfigMap, the
// administrator's RoleBinding, the platform's GPU quota) and Events, which expire on their own.
func namespaceObjects(ctx context.Context, ns string) ([]string, error) {
	lists, err := env.Clientset().Discovery().ServerPreferredNamespacedResources()
	if err != nil {
		return nil, err
	}
	before := map[string]bool{"ServiceAccount/default": true, "ConfigMap/kube-root-ca.crt": true, "RoleBinding/nora-admin": true,
		"ResourceQuota/platform-gpus": true}
	var left []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || r.Kind == "Event" || r.Kind == "Endpoints" {
				continue
			}
			objs, err := env.Dynamic().Resource(gv.WithResource(r.Name)).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", r.Name, err)
			}
			for _, o := range objs.Items {
				if name := r.Kind + "/" + o.GetName(); !before[name] {
					left = append(left, name)
				}
			}
		}
	}
	return left, nil
}

// ownControlPlane starts a control plane for the test alone and makes it env until the test ends.
func ownControlPlane(t *testing.T, ctx context.Context) *cluster.Cluster {
	t.Helper()
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	before := env
	env = c
	t.Cleanup(func() { env = before })
	return c
}
