package realnode_test

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/internal/checkout"
	"evals.si/operator/internal/guide"
	"evals.si/operator/internal/pki"
	"evals.si/operator/isolation"
)

// TestInstallGuide runs the Install and Uninstall sections of docs/install.md as written, block by
// block, with the kubectl, helm and make a user runs, on the real node: `make push` builds the
// images and pushes them to the node's registry, the kubelet pulls them by digest, and every pod
// the charts make runs in a container, passing its probes as the kubelet runs them. The
// platform's evalsid is the reference server, run on the node's address as a server outside the
// cluster, over https with a certificate of a CA of the test's, which the guide hands the chart.
// Then an invalid object is refused by the webhook through its Service, and after the uninstall
// no object is stuck.
func TestInstallGuide(t *testing.T) {
	c, node := realNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	helm, err := cluster.Helm(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	tools := t.TempDir()
	for name, target := range map[string]string{"kubectl": c.Kubectl, "helm": helm} {
		if err := os.Symlink(target, filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}
	evalsidURL, evalsidCA := platformEvalsid(t, ctx, c, world.bin)
	env := append(os.Environ(), "PATH="+tools+":"+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig,
		"REGISTRY="+node.Registry+"/evalsi", "EVALSID_URL="+evalsidURL, "EVALSID_CA="+evalsidCA,
		// The API server calls a webhook's Service from the node; kube-proxy masquerades it as
		// the pods' bridge address.
		"APISERVER_CIDR=10.244.0.1/32")
	run := func(section, block string) {
		t.Helper()
		out, err := guide.Run(ctx, block, root, env)
		if err != nil {
			t.Fatalf("%s:\n%s\nfailed: %v\n%s\n%s", section, block, err, out, notReady(ctx, c))
		}
		t.Logf("%s:\n%s%s", section, block, out)
	}
	blocks := func(title string) []string {
		b, err := guide.Blocks(filepath.Join(root, "docs", "install.md"), title)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, b := range blocks("Install") {
		run("Install", b)
	}
	// With kubernetesAPI.cidrs unset, the charts' pods and the pod rung's launchers reach the
	// API server's ports only at its endpoints, as the install found them (the node's address,
	// 6443): the webhook's and the signer's NetworkPolicies, and the sandbox operator's flag.
	// The webhook answering the guide's applies, and the signer its requests, show they still
	// reach it.
	const apiServer = "10.88.0.2/32"
	for _, np := range []struct{ ns, name string }{{"evalsi-system", "evalsi-webhook"}, {"evalsi-system", "evalsi-signer"}, {"evalsi-sandbox", "evalsi-sandboxd"}} {
		policy, err := c.Clientset().NetworkingV1().NetworkPolicies(np.ns).Get(ctx, np.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var apiPeers []string
		for _, rule := range policy.Spec.Egress {
			for _, port := range rule.Ports {
				if port.Port != nil && port.Port.IntValue() == 6443 {
					for _, peer := range rule.To {
						if peer.IPBlock != nil {
							apiPeers = append(apiPeers, peer.IPBlock.CIDR)
						}
					}
				}
			}
		}
		if len(apiPeers) != 1 || apiPeers[0] != apiServer {
			t.Errorf("NetworkPolicy %s/%s lets its pods reach the API server's ports at %v, want only %s", np.ns, np.name, apiPeers, apiServer)
		}
	}
	sandboxd, err := c.Clientset().AppsV1().Deployments("evalsi-sandbox").Get(ctx, "evalsi-sandboxd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(sandboxd.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--kubernetes-api-cidrs="+apiServer) {
		t.Errorf("the sandbox operator's launchers are not held to the API server's endpoint: %s", args)
	}
	// The SandboxClasses the guide installs: each rung's pool ran its isolation probe in a real
	// container under the enforced NetworkPolicy, and the class says what is in force. The
	// bubblewrap class's user namespaces do not start on this node (the closing note of issue 67).
	classes := c.Dynamic().Resource(schema.GroupVersionResource{Group: "evals.si", Version: "v1alpha1", Resource: "sandboxclasses"})
	for class, want := range map[string][]string{
		"landlock": {"landlock ABI", "seccomp filter", "no_new_privs", "no capabilities", "kubernetes unreachable", "metadata unreachable"},
		"pod":      {"seccomp filter", "no_new_privs", "no capabilities", "metadata unreachable"},
	} {
		clustertest.Eventually(t, ctx, "SandboxClass "+class+" Isolated", func() error {
			u, err := classes.Get(ctx, class, metav1.GetOptions{})
			if err != nil {
				return err
			}
			isolation, _, _ := unstructured.NestedString(u.Object, "status", "isolation")
			conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, cond := range conditions {
				m, _ := cond.(map[string]any)
				if m["type"] == "Isolated" && m["status"] != "True" {
					return fmt.Errorf("Isolated %v: %v", m["status"], m["message"])
				}
			}
			for _, w := range want {
				if !strings.Contains(isolation, w) {
					return fmt.Errorf("status.isolation %q lacks %q", isolation, w)
				}
			}
			return nil
		})
	}

	// A pod rung trial, made as the class's launcher makes one, runs to its end on the node; one
	// off its shape is refused.
	trialRunsInItsShape(t, ctx, c, imagesEnv(t, root))

	// The pools' pods, as the kubelet runs them from the pool image (its stand-in programs report
	// what their pod was given): the projected token, evalsid at the guide's private-CA URL
	// answering through the pool's NetworkPolicy and verified with the CA the chart handed the
	// pod, and the metadata listener and the Kubernetes API dropped by the policy.
	for _, pool := range []struct{ ns, selector, container string }{
		{"team-a", "app.kubernetes.io/name=evaluator,app.kubernetes.io/instance=judge", "evaluator"},
		{"evalsi-sandbox", "app.kubernetes.io/name=sandboxclass,app.kubernetes.io/instance=landlock", "sandboxd"},
	} {
		token, signIn, result := standInReport(t, ctx, c, pool.ns, pool.selector, pool.container)
		if !strings.Contains(token, "token present at /var/run/secrets/evals.si/token; evalsid "+evalsidURL) {
			t.Errorf("%s pool: the stand-in says %q, want its projected token and evalsid's URL", pool.container, token)
		}
		// Its own certificate, which the kubelet got from evalsi-crds's signer, naming the pod's
		// service account; evalsid, requiring the signer's certificates, took it beside the token.
		if !strings.Contains(signIn, "certificate: system:serviceaccount:"+pool.ns+":") || !strings.Contains(signIn, "issued by evalsi-workload-ca") ||
			!strings.Contains(signIn, "evalsid: signed in") {
			t.Errorf("%s pool: the sign-in says %q, want its own certificate from the workload signer, accepted by evalsid", pool.container, signIn)
		}
		r := result.Report.Reach
		if got := r["evalsid"]; !got.Reachable || got.TLS != "verified" {
			t.Errorf("%s pool: evalsid %+v, want it reachable and its certificate verified with the CA the pod was handed", pool.container, got)
		}
		for _, closed := range []string{"metadata", "kubernetes"} {
			if got, ok := r[closed]; !ok || got.Reachable {
				t.Errorf("%s pool: %s %+v (dialed: %v), want it dropped by the pool's NetworkPolicy", pool.container, closed, got, ok)
			}
		}
	}

	// An EvalRun of a CheckpointServer waits until the server is Ready, then runs: the server on
	// the stand-in vLLM image `make push` pushed, which answers /health 15 s after it starts.
	images := imagesEnv(t, root)
	apply := func(manifest string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, c.Kubectl, "--kubeconfig="+c.Kubeconfig, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
		}
	}
	apply(fmt.Sprintf(`apiVersion: evals.si/v1alpha1
kind: CheckpointServer
metadata: {name: step-900, namespace: team-a}
spec:
  model: evalsi/demo-step-900
  servedModelName: run1-step900
  image: %s@%s
  gpus: 0
  resources: {requests: {cpu: 50m, memory: 64Mi}}
  extraArgs: [--standin-health-delay=15s]
---
apiVersion: evals.si/v1alpha1
kind: EvalRun
metadata: {name: eval-step-900, namespace: team-a}
spec:
  suite: smoke
  target: {checkpointServer: step-900}
  evaluators: [judge]
`, images["MODEL_IMAGE_REPOSITORY"], images["MODEL_IMAGE_DIGEST"]))
	runs := c.Dynamic().Resource(schema.GroupVersionResource{Group: "evals.si", Version: "v1alpha1", Resource: "evalruns"}).Namespace("team-a")
	var waited bool
	clustertest.Eventually(t, ctx, "the EvalRun of the CheckpointServer Complete", func() error {
		u, err := runs.Get(ctx, "eval-step-900", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cond := range conditions {
			m, _ := cond.(map[string]any)
			if msg, _ := m["message"].(string); m["type"] == "Ready" && msg == "waiting for CheckpointServer step-900 to be Ready" {
				waited = true
			}
			if m["type"] == "Complete" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", conditions)
	})
	if !waited {
		t.Errorf("the EvalRun of CheckpointServer step-900 was never seen waiting for it to be Ready")
	}
	// The server's pod would outlive the uninstall, holding its requests on the node.
	del := exec.CommandContext(ctx, c.Kubectl, "--kubeconfig="+c.Kubeconfig, "-n", "team-a", "delete", "checkpointserver/step-900", "evalrun/eval-step-900", "--wait=true")
	if out, err := del.CombinedOutput(); err != nil {
		t.Errorf("deleting the CheckpointServer and its EvalRun: %v\n%s", err, out)
	}

	// What a user sees next: an invalid object is refused at once, with the field named.
	bad := exec.CommandContext(ctx, c.Kubectl, "--kubeconfig="+c.Kubeconfig, "apply", "-f", "-")
	bad.Stdin = strings.NewReader("apiVersion: evals.si/v1alpha1\nkind: Evaluator\nmetadata: {name: bad, namespace: team-a}\nspec: {autoscaling: {minReplicas: -1}}\n")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "validate.evals.si") || !strings.Contains(string(out), "minReplicas") {
		t.Errorf("kubectl apply of an invalid Evaluator: %v\n%s\nwant a refusal by the webhook naming minReplicas", err, out)
	}

	before, err := c.Clientset().CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks("Uninstall") {
		run("Uninstall", b)
	}
	// Nothing is stuck: the Evaluator lost its finalizer and deletes without the operator.
	evaluators := c.Dynamic().Resource(schema.GroupVersionResource{Group: "evals.si", Version: "v1alpha1", Resource: "evaluators"}).Namespace("team-a")
	got, err := evaluators.Get(ctx, "judge", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the example Evaluator after uninstall: %v", err)
	}
	if f := got.GetFinalizers(); len(f) != 0 {
		t.Errorf("the example Evaluator keeps finalizers %v after uninstall", f)
	}
	if err := evaluators.Delete(ctx, "judge", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the example Evaluator deleted", func() error {
		if _, err := evaluators.Get(ctx, "judge", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	for _, ns := range before.Items {
		n, err := c.Clientset().CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
		if err != nil || n.DeletionTimestamp != nil {
			t.Errorf("namespace %s after the uninstall: %v, deleting=%v", ns.Name, err, err == nil && n.DeletionTimestamp != nil)
		}
	}
}

// notReady says, of every pod that is not Ready, what the kubelet reported: for a guide step
// that timed out.
func notReady(ctx context.Context, c *cluster.Cluster) string {
	pods, err := c.Clientset().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var lines []string
	for i := range pods.Items {
		p := &pods.Items[i]
		ready := false
		for _, cond := range p.Status.Conditions {
			ready = ready || (cond.Type == "Ready" && cond.Status == "True")
		}
		if !ready && p.Status.Phase != "Succeeded" {
			lines = append(lines, fmt.Sprintf("%s/%s %s: %s", p.Namespace, p.Name, p.Status.Phase, podEvents(ctx, c, p)))
		}
	}
	return "pods not Ready:\n" + strings.Join(lines, "\n")
}

// platformEvalsid plays the platform's evalsid that the guide's EVALSID_URL names: the reference
// server, run from bin on the node's address as a server outside the cluster, over https with a
// certificate of a CA of the test's, accepting the cluster's service-account tokens and knowing
// the one namespace the guide installs an operator into, and requiring of every caller a
// certificate of the workload signer's ClusterTrustBundle, of its token's identity. It returns its
// URL and the CA's file.
func platformEvalsid(t *testing.T, ctx context.Context, c *cluster.Cluster, bin string) (url, caFile string) {
	t.Helper()
	const addr = "10.88.0.2:8443"
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := evalsidCertificate(t)
	for file, data := range map[string][]byte{"ca.crt": caPEM, "tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "evalsid", "--listen="+addr, "--kubernetes-audience=evalsi", "--kubeconfig="+c.Kubeconfig,
		"--operator-namespace=team-a", "--tls-cert-file="+filepath.Join(dir, "tls.crt"), "--tls-key-file="+filepath.Join(dir, "tls.key"),
		// Every caller presents its certificate from the workload signer the guide installs.
		"--client-ca-signer=evals.si/workload")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("the platform's evalsid:\n%s", log.String())
		}
	})
	clustertest.Eventually(t, ctx, "the platform's evalsid listening", func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return "https://" + addr, filepath.Join(dir, "ca.crt")
}

// standInReport waits until the stand-in program of a pool's pod (testdata/pool-standin) has
// logged its report, and returns its line about the token and evalsid, its sign-in lines, and the
// isolation probe's result it ran from inside the pod.
func standInReport(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, selector, container string) (string, string, isolation.Result) {
	t.Helper()
	var token, signIn string
	var result isolation.Result
	clustertest.Eventually(t, ctx, "the "+container+" stand-in's report in "+ns, func() error {
		pods, err := c.Clientset().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pod %s", selector)
		}
		logs, err := c.Clientset().CoreV1().Pods(ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{Container: container}).Do(ctx).Raw()
		if err != nil {
			return err
		}
		token, signIn = "", ""
		for _, line := range strings.Split(string(logs), "\n") {
			if rest, ok := strings.CutPrefix(line, container+": reach: "); ok {
				if err := json.Unmarshal([]byte(rest), &result); err != nil {
					return fmt.Errorf("the report %q: %v", rest, err)
				}
				if token == "" {
					return fmt.Errorf("no token line before the report:\n%s", logs)
				}
				return nil
			}
			if strings.HasPrefix(line, container+": token ") {
				token = line
			}
			if rest, ok := strings.CutPrefix(line, container+": sign-in: "); ok {
				signIn += rest + "\n"
			}
		}
		return fmt.Errorf("no report yet:\n%s", logs)
	})
	return token, signIn, result
}

func evalsidCertificate(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	ca, caKey, err := pki.NewCA("platform evalsid CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.NewLeaf(ca, caKey, x509.Certificate{Subject: pkix.Name{CommonName: "evalsid"},
		IPAddresses: []net.IP{net.ParseIP("10.88.0.2")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if keyPEM, err = pki.EncodeKey(key); err != nil {
		t.Fatal(err)
	}
	return pki.EncodeCert(ca), pki.EncodeCert(cert), keyPEM
}
