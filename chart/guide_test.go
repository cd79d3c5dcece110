package chart_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/internal/pki"
)

// guideBlocks returns the ```sh blocks of the section titled title in docs/install.md, in order,
// with the list indentation removed.
func guideBlocks(t *testing.T, title string) []string {
	t.Helper()
	f, err := os.Open("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []string
	var in, fenced bool
	var block strings.Builder
	indent := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## "+title
		case !in:
		case !fenced && trimmed == "```sh":
			fenced, indent = true, line[:strings.Index(line, "`")]
			block.Reset()
		case fenced && trimmed == "```":
			fenced = false
			blocks = append(blocks, block.String())
		case fenced:
			block.WriteString(strings.TrimPrefix(line, indent) + "\n")
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("docs/install.md has no sh block under %q", title)
	}
	return blocks
}

// TestInstallGuide runs the Install and Uninstall sections of docs/install.md as written, block by
// block, with the kubectl and helm a user runs, on a control plane that already has the CRDs (as
// the test clusters do). The Kubelet plays the charts' webhook, evalsid, operators and uninstall
// hook from the operator binary, so the webhook really admits and the operator really reconciles.
// KWOK reports pods ready at once; after each block the test waits for the played pods of the
// Deployments that exist to pass their readiness probes, as a kubelet would before a rollout ends.
func TestInstallGuide(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs := env.Clientset()
	// Earlier tests' releases go first; the CRDs stay, as on a cluster where they were applied
	// by hand.
	for _, r := range [][]string{{"evalsi", "team-a"}, {"evalsi-sandboxd", "evalsi-sandbox"}, {"evalsi-crds", "evalsi-system"}} {
		helmErr(t, "uninstall", r[0], "-n", r[1], "--ignore-not-found", "--no-hooks", "--wait", "--kubeconfig="+env.Kubeconfig)
	}
	before, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	tools := t.TempDir()
	for name, target := range map[string]string{"kubectl": env.Kubectl, "helm": helmPath(t)} {
		if err := os.Symlink(target, filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}
	bin := clustertest.Operator(t)
	evalsidURL := platformEvalsid(t, ctx, bin)
	kubelet := &clustertest.Kubelet{
		Bin: bin,
		Deployments: []string{"evalsi-system/evalsi-webhook", "team-a/evalsi-operator",
			"evalsi-sandbox/evalsi-sandboxd"},
		Jobs: []string{"team-a/evalsi-release-finalizers"},
	}
	kubelet.Start(t, ctx, env)

	run := func(section, block string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", block)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "PATH="+tools+":"+os.Getenv("PATH"), "KUBECONFIG="+env.Kubeconfig, "EVALSID_URL="+evalsidURL,
			"APISERVER_CIDR=127.0.0.1/32") // the test control plane's API server calls webhooks from loopback
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s:\n%s\nfailed: %v\n%s", section, block, err, out)
		}
		t.Logf("%s:\n%s%s", section, block, out)
		kubelet.Settle(t, ctx)
	}
	for _, b := range guideBlocks(t, "Install") {
		run("Install", b)
	}

	// What a user sees next: an invalid object is refused at once, with the field named.
	bad := exec.CommandContext(ctx, env.Kubectl, "--kubeconfig="+env.Kubeconfig, "apply", "-f", "-")
	bad.Stdin = strings.NewReader("apiVersion: evals.si/v1alpha1\nkind: Evaluator\nmetadata: {name: bad, namespace: team-a}\nspec: {autoscaling: {minReplicas: -1}}\n")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "validate.evals.si") || !strings.Contains(string(out), "minReplicas") {
		t.Errorf("kubectl apply of an invalid Evaluator: %v\n%s\nwant a refusal by the webhook naming minReplicas", err, out)
	}

	for _, b := range guideBlocks(t, "Uninstall") {
		run("Uninstall", b)
	}

	// Nothing is stuck: the Evaluator lost its finalizer and deletes without the operator.
	evaluators := env.Dynamic().Resource(evalsi("evaluators")).Namespace("team-a")
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
	// No namespace that was there before the guide is gone or going.
	for _, ns := range before.Items {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
		if err != nil || n.DeletionTimestamp != nil {
			t.Errorf("namespace %s after the uninstall: %v, deleting=%v", ns.Name, err, err == nil && n.DeletionTimestamp != nil)
		}
	}
}

// platformEvalsid plays the platform's evalsid that the guide's EVALSID_URL names: the reference
// server, run from bin on a loopback port as a process outside the cluster, accepting the
// cluster's service-account tokens and reading project bindings cluster-wide as the platform's
// would, and knowing the one namespace the guide installs an operator into. It returns its URL
// and stops with the test.
func platformEvalsid(t *testing.T, ctx context.Context, bin string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// Over https, as the guide's sandboxd requires: a certificate of a CA of the test's, which
	// the played pods (started with the test's environment) trust through SSL_CERT_FILE.
	dir := t.TempDir()
	ca, caKey, err := pki.NewCA("platform evalsid CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.NewLeaf(ca, caKey, x509.Certificate{Subject: pkix.Name{CommonName: "evalsid"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string][]byte{"ca.crt": pki.EncodeCert(ca), "tls.crt": pki.EncodeCert(cert), "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("SSL_CERT_FILE", filepath.Join(dir, "ca.crt"))
	cmd := exec.Command(bin, "evalsid", "--listen="+addr, "--kubernetes-audience=evalsi", "--kubeconfig="+env.Kubeconfig,
		"--operator-namespace=team-a", "--tls-cert-file="+filepath.Join(dir, "tls.crt"), "--tls-key-file="+filepath.Join(dir, "tls.key"))
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
	return "https://" + addr
}
