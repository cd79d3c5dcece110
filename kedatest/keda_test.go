// Package kedatest runs what the operator renders for autoscaled pools against a real KEDA (its
// operator and admission webhooks, built from KEDA's module) and the reference evalsid, on a
// control plane of its own: KEDA must accept every ScaledObject and TriggerAuthentication, read
// the queue depth with the credentials they name, and scale a pool from zero and back while the
// operator leaves the replicas alone.
package kedatest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
)

var shared = clustertest.New(cluster.Options{CRDDirs: []string{"../chart/evalsi-crds/files/crds"}})

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// deploymentWrites sums the operator's write requests to Deployments from its /metrics.
func deploymentWrites(t *testing.T, metricsURL string) float64 {
	t.Helper()
	var n float64
	for _, m := range clustertest.Scrape(t, metricsURL)["evalsi_kube_requests_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["resource"] == "deployments" && slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE"}, labels["verb"]) {
			n += counterValue(m)
		}
	}
	return n
}

func counterValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

func TestKEDAScalesAPoolFromZeroAndBack(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs := c.Clientset()
	ns, sandbox := "team-k", "evalsi-sandbox"
	var audiences []cluster.KedaTokenAudience
	for _, n := range []string{ns, sandbox} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// What the evalsi and evalsi-sandboxd charts make: the account KEDA reads queues as.
		if _, err := cs.CoreV1().ServiceAccounts(n).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: evalsi.QueueReaderServiceAccount}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		audiences = append(audiences, cluster.KedaTokenAudience{Audience: evalsi.DefaultTokenAudience, Namespace: n, ServiceAccountName: evalsi.QueueReaderServiceAccount})
	}
	if err := c.StartKeda(ctx, audiences); err != nil {
		t.Fatal(err)
	}

	// The reference evalsid, trusting the cluster's service-account tokens for its audience.
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	api := evalsid.New(map[string]string{"operator-token": "system:serviceaccount:" + ns + ":evalsi-operator"}, evalsid.DefaultSchedule)
	api.TrustKubernetes(&evalsid.KubernetesIssuer{APIServer: c.Config.Host, Client: hc, Audience: evalsi.DefaultTokenAudience})
	// The SandboxClass pool's queue is read by the sandbox namespace's queue reader.
	api.SetSandboxNamespace(sandbox)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go api.Serve(ctx, l)

	// The operator as a process, its metrics on loopback.
	dir := t.TempDir()
	bin := clustertest.Operator(t)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("operator-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ml.Addr().String()
	ml.Close()
	logPath := filepath.Join(dir, "operator.log")
	logs, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	op := exec.Command(bin, "run", "--kubeconfig="+c.Kubeconfig, "--controllers=evaluator,sandboxclass", "--sandbox-namespace="+sandbox,
		"--leader-elect=false", "--metrics-bind-address="+metricsAddr, "--health-probe-bind-address=0",
		"--discovery-interval=1s", "--api-url=http://"+l.Addr().String(), "--api-token-file="+tokenFile)
	op.Stdout, op.Stderr = logs, logs
	if err := op.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		clustertest.Interrupt(t, "the operator", op)
		if t.Failed() {
			for _, f := range []string{logPath, filepath.Join(c.Dir, "keda-operator.log"), filepath.Join(c.Dir, "keda-webhooks.log")} {
				out, _ := os.ReadFile(f)
				t.Logf("%s:\n%s", f, tailLines(string(out), 40))
			}
		}
	})

	dyn := c.Dynamic()
	// Every autoscaling setting the operator renders, on an Evaluator and a SandboxClass pool.
	others := []*unstructured.Unstructured{
		{Object: map[string]any{
			"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
			"metadata": map[string]any{"name": "full", "namespace": ns},
			"spec": map[string]any{"autoscaling": map[string]any{
				"minReplicas": int64(1), "maxReplicas": int64(20), "idleReplicas": int64(0), "targetQueueDepth": int64(25),
				"pollingInterval": "15s", "cooldownPeriod": "5m", "fallback": map[string]any{"replicas": int64(4)},
			}},
		}},
		{Object: map[string]any{
			"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass",
			"metadata": map[string]any{"name": "burst"},
			"spec": map[string]any{"rung": "landlock", "autoscaling": map[string]any{
				"minReplicas": int64(0), "maxReplicas": int64(5), "fallback": map[string]any{"replicas": int64(1), "failureThreshold": int64(5)},
			}},
		}},
	}
	for _, o := range others {
		gvr, namespace := evalsi.Evaluators, ns
		if o.GetKind() == "SandboxClass" {
			gvr, namespace = evalsi.SandboxClasses, ""
		}
		if _, err := dyn.Resource(gvr).Namespace(namespace).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	evaluator := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": "judge", "namespace": ns},
		"spec": map[string]any{"autoscaling": map[string]any{
			"minReplicas": int64(0), "maxReplicas": int64(3), "targetQueueDepth": int64(2),
			"pollingInterval": "1s", "cooldownPeriod": "3s",
		}},
	}}
	if _, err := dyn.Resource(evalsi.Evaluators).Namespace(ns).Create(ctx, evaluator, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := "judge-evaluator"
	condition := func(obj *unstructured.Unstructured, typ string) string {
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == typ {
				return fmt.Sprintf("%v %v: %v", m["status"], m["reason"], m["message"])
			}
		}
		return "none"
	}
	get := func(gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
		return dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	}
	clustertest.Eventually(t, ctx, "KEDA accepts the ScaledObject and makes its HPA", func() error {
		ev, err := get(evalsi.Evaluators, "judge")
		if err != nil {
			return err
		}
		if r := condition(ev, "Ready"); !strings.HasPrefix(r, "True") {
			return fmt.Errorf("Evaluator Ready: %s", r)
		}
		so, err := get(evalsi.ScaledObjects, name)
		if err != nil {
			return err
		}
		if r := condition(so, "Ready"); !strings.HasPrefix(r, "True") {
			return fmt.Errorf("ScaledObject Ready: %s", r)
		}
		_, err = cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "keda-hpa-"+name, metav1.GetOptions{})
		return err
	})
	for _, so := range []struct{ ns, name string }{{ns, "full-evaluator"}, {sandbox, "sandbox-burst"}} {
		clustertest.Eventually(t, ctx, "KEDA accepts ScaledObject "+so.name, func() error {
			got, err := dyn.Resource(evalsi.ScaledObjects).Namespace(so.ns).Get(ctx, so.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if r := condition(got, "Ready"); !strings.HasPrefix(r, "True") {
				return fmt.Errorf("Ready: %s", r)
			}
			return nil
		})
	}

	// KEDA's admission webhook is in force: a second ScaledObject for the same Deployment is
	// refused.
	rival, err := get(evalsi.ScaledObjects, name)
	if err != nil {
		t.Fatal(err)
	}
	rival = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rival.GetAPIVersion(), "kind": rival.GetKind(),
		"metadata": map[string]any{"name": "rival", "namespace": ns}, "spec": rival.Object["spec"],
	}}
	if _, err := dyn.Resource(evalsi.ScaledObjects).Namespace(ns).Create(ctx, rival, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "vscaledobject.kb.io") {
		t.Errorf("a second ScaledObject for %s: %v, want a refusal by KEDA's webhook", name, err)
	}

	replicas := func(want int64) func() error {
		return func() error {
			d, err := get(evalsi.Deployments, name)
			if err != nil {
				return err
			}
			if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != want {
				return fmt.Errorf("spec.replicas %d, want %d", r, want)
			}
			return nil
		}
	}
	clustertest.Eventually(t, ctx, "an idle pool at zero", replicas(0))
	before := deploymentWrites(t, "http://"+metricsAddr+"/metrics")

	api.SetQueueDepth(ns, v1.PoolKind_POOL_KIND_EVALUATOR, "judge", 5)
	clustertest.Eventually(t, ctx, "KEDA activates the pool when its queue fills", replicas(1))
	api.SetQueueDepth(ns, v1.PoolKind_POOL_KIND_EVALUATOR, "judge", 0)
	clustertest.Eventually(t, ctx, "KEDA scales the pool back to zero after the cooldown", replicas(0))

	if w := deploymentWrites(t, "http://"+metricsAddr+"/metrics") - before; w != 0 {
		t.Errorf("the operator wrote the Deployment %v times while KEDA scaled it, want 0", w)
	}
	if n := api.Calls("GetQueueDepth"); n == 0 {
		t.Error("KEDA never read the queue")
	}
	for _, call := range api.CallLog() {
		if call.Method == "GetQueueDepth" && call.Code != 0 {
			t.Errorf("a queue read failed with %v: KEDA's credentials or URL are wrong", call.Code)
			break
		}
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
