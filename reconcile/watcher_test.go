package reconcile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
)

// TestCheckpointWatcherFlow drives the real kubectl exactly as the checkpoint watcher of ADR 0025
// does, with the ownerReference that keeps it from leaking servers: for each checkpoint it applies
// a CheckpointServer labelled managed-by: evalsi and owned by its own Pod, waits for Ready, reads
// status.endpoint and status.servedModelName, evaluates against them (unkeyed: the endpoint read;
// keyed: the server by name with the variable holding its key), waits for the run to end, and
// deletes the server whether the run succeeded or failed. Then the watcher's Pod goes, and the
// garbage collector takes the server it still owned with its children; and `leaked-servers`
// lists a server made the old way, without an owner.
func TestCheckpointWatcherFlow(t *testing.T) {
	t.Parallel() // see envMu

	bin := clustertest.Operator(t) // built before the test's clock starts: a cold build is slow
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig(ns)
	// The CheckpointServer controller too; not the SandboxClass one, which would reconcile the
	// classes of the tests that run beside this one.
	cfg.Controllers = []string{"evalrun", "onlineevalpolicy", "tracesource", "checkpointserver"}
	startEngine(t, cfg)

	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, env.Kubectl, append([]string{"--kubeconfig=" + env.Kubeconfig, "-n", ns}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return out.String()
	}
	watcher, err := env.Clientset().CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "watcher"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "watch", Image: "evalsi/platform:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	server := func(name, extra string) string {
		return fmt.Sprintf(`apiVersion: evals.si/v1alpha1
kind: CheckpointServer
metadata:
  name: %s
  labels: {app.kubernetes.io/managed-by: evalsi}
  ownerReferences:
    - {apiVersion: v1, kind: Pod, name: watcher, uid: %s}
spec:
  model: evals/%s
  servedModelName: run1-%s
%s`, name, watcher.UID, name, name, extra)
	}
	children := func(name string) func() error {
		return func() error {
			for _, gvr := range []schema.GroupVersionResource{evalsi.CheckpointServers, evalsi.Deployments, evalsi.Services} {
				n := name
				if gvr != evalsi.CheckpointServers {
					n += "-vllm"
				}
				if _, err := client(gvr, ns).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("%s %s still there (%v)", gvr.Resource, n, err)
				}
			}
			return nil
		}
	}

	for _, tc := range []struct {
		server, serverSpec, target string
		ends                       v1.Phase
		condition                  string
	}{
		{"step-900", "", "  target:\n    endpoint: {url: %q, model: %q}\n", v1.Phase_PHASE_SUCCEEDED, "Complete"},
		{"step-1000", "  apiKeySecret: {name: vllm-keys, key: step-1000}\n",
			"  target: {checkpointServer: step-1000, apiKeyEnv: CKPT_API_KEY}\n", v1.Phase_PHASE_FAILED, "Failed"},
	} {
		kubectl(server(tc.server, tc.serverSpec), "apply", "-f", "-")
		kubectl("", "wait", "--for=condition=Ready", "checkpointserver/"+tc.server, "--timeout=2m")
		endpoint := kubectl("", "get", "checkpointserver", tc.server, "-o", "jsonpath={.status.endpoint}")
		model := kubectl("", "get", "checkpointserver", tc.server, "-o", "jsonpath={.status.servedModelName}")
		if want := "http://" + tc.server + "-vllm." + ns + ".svc:8000/v1"; endpoint != want || model != "run1-"+tc.server {
			t.Errorf("%s: endpoint %q model %q, want %q run1-%s", tc.server, endpoint, model, want, tc.server)
		}
		target := tc.target
		if strings.Contains(target, "%q") {
			target = fmt.Sprintf(target, endpoint, model)
		}
		run := "eval-" + tc.server
		kubectl("apiVersion: evals.si/v1alpha1\nkind: EvalRun\nmetadata: {name: "+run+"}\nspec:\n  suite: smoke\n"+target, "apply", "-f", "-")
		got := waitPhase(t, ctx, ns, run, "Pending")
		id, _, _ := unstructured.NestedString(got.Object, "status", "runId")
		if err := api.SetPhase(id, tc.ends); err != nil {
			t.Fatal(err)
		}
		kubectl("", "wait", "--for=condition="+tc.condition, "evalrun/"+run, "--timeout=2m")
		kubectl("", "delete", "checkpointserver", tc.server, "--wait=true", "--timeout=1m")
		clustertest.Eventually(t, ctx, tc.server+" and its children gone", children(tc.server))
	}
	for _, r := range api.Runs() {
		e := r.Spec.Target.Endpoint
		if !strings.HasPrefix(e.Url, "http://step-") || !strings.HasPrefix(e.Model, "run1-step-") {
			t.Errorf("run %s evaluated %s %s, not a checkpoint server", r.Id, e.Url, e.Model)
		}
	}

	// The watcher dies with a server still up: the garbage collector removes it, children and all.
	kubectl(server("step-1100", ""), "apply", "-f", "-")
	kubectl("", "wait", "--for=condition=Ready", "checkpointserver/step-1100", "--timeout=2m")
	kubectl("", "delete", "pod", "watcher", "--wait=true", "--timeout=1m")
	clustertest.Eventually(t, ctx, "the server of a watcher that is gone collected", children("step-1100"))

	// A server made without an owner is listed as leaked; a fresh one is not, until it is old.
	kubectl("apiVersion: evals.si/v1alpha1\nkind: CheckpointServer\nmetadata:\n  name: step-1200\n  labels: {app.kubernetes.io/managed-by: evalsi}\nspec: {model: m}\n", "apply", "-f", "-")
	leaked := func(olderThan string) string {
		out, err := exec.CommandContext(ctx, bin, "leaked-servers", "--kubeconfig="+env.Kubeconfig, "-n", ns, "--older-than="+olderThan).CombinedOutput()
		if err != nil {
			t.Fatalf("leaked-servers: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := leaked("1h"); strings.Contains(out, "step-1200") {
		t.Errorf("a fresh server listed as leaked:\n%s", out)
	}
	if out := leaked("0s"); !strings.Contains(out, "step-1200") || !strings.Contains(out, "no owner") {
		t.Errorf("a server without an owner not listed as leaked:\n%s", out)
	}
	// One whose owner reference names a kind nobody serves is listed, and the listing goes on
	// past it: servers are listed by name, so step-1150 comes before step-1200.
	kubectl("apiVersion: evals.si/v1alpha1\nkind: CheckpointServer\nmetadata:\n  name: step-1150\n  labels: {app.kubernetes.io/managed-by: evalsi}\n"+
		"  ownerReferences:\n    - {apiVersion: example.com/v1, kind: Gadget, name: g, uid: 0b0e5c1d-0000-4000-8000-000000000001}\nspec: {model: m}\n", "apply", "-f", "-")
	out := leaked("1h")
	if !strings.Contains(out, "its owner Gadget g is of a kind the API server does not serve (example.com/v1)") {
		t.Errorf("a server owned by an unserved kind not listed as leaked:\n%s", out)
	}
	if out := leaked("0s"); !strings.Contains(out, "step-1200") {
		t.Errorf("the listing stopped at the server with a bad owner reference:\n%s", out)
	}
	// As a user runs it: the cluster from KUBECONFIG, its context named, the answer as JSON.
	cmd := exec.CommandContext(ctx, bin, "leaked-servers", "--context="+kubeconfigContext(t), "-n", ns, "--older-than=0s", "-o", "json")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	jsonOut, err := cmd.Output()
	if err != nil {
		t.Fatalf("leaked-servers -o json: %v", err)
	}
	var rows []struct{ Namespace, Name, Why string }
	if err := json.Unmarshal(jsonOut, &rows); err != nil {
		t.Fatalf("leaked-servers -o json: %v\n%s", err, jsonOut)
	}
	if !slices.ContainsFunc(rows, func(r struct{ Namespace, Name, Why string }) bool {
		return r.Namespace == ns && r.Name == "step-1200" && strings.Contains(r.Why, "no owner")
	}) {
		t.Errorf("leaked-servers -o json, with KUBECONFIG and --context: %s", jsonOut)
	}
}

// kubeconfigContext is the current context of the test control plane's kubeconfig.
func kubeconfigContext(t *testing.T) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.CurrentContext
}
