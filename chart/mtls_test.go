package chart_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/internal/pki"
)

// TestMutualTLSWithSecrets installs the evalsi chart with tls.enabled and the two Secrets a team
// provides in place of cert-manager, plays its evalsid and operator from the chart's own pod
// specs, and checks that the operator's runs reach evalsid over mutual TLS while a caller without
// a client certificate is refused.
func TestMutualTLSWithSecrets(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	installCRDsChart(t)
	cs := env.Clientset()
	ns := "team-m"
	activeNamespace(t, ctx, ns, nil)

	ca, caKey, err := pki.NewCA("team-m-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	secret := func(name string, tmpl x509.Certificate) tls.Certificate {
		certPEM, keyPEM, err := pki.NewLeafPEM(ca, caKey, tmpl, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": pki.EncodeCert(ca)}}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return pair
	}
	secret("evalsid-tls", x509.Certificate{Subject: pkix.Name{CommonName: "evalsid"},
		DNSNames: []string{"evalsid." + ns + ".svc"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	secret("evalsi-operator-tls", x509.Certificate{Subject: pkix.Name{CommonName: "system:serviceaccount:" + ns + ":evalsi-operator"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

	// The workload signer's CA, as evalsi-crds's signer publishes it: the in-chart evalsid
	// verifies pools' certificates with it.
	workloadCA, _, err := pki.NewCA("evalsi-workload-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bundles := cs.CertificatesV1().ClusterTrustBundles()
	if _, err := bundles.Create(ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "evals.si:workload:ca"},
		Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "evals.si/workload", TrustBundle: string(pki.EncodeCert(workloadCA))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bundles.Delete(context.Background(), "evals.si:workload:ca", metav1.DeleteOptions{}) })

	notes := helm(t, "install", "evalsi-mtls", "evalsi", "-n", ns, "--set", "tls.enabled=true", "--set", "referenceEvalsid.enabled=true", "--kubeconfig="+env.Kubeconfig)
	// The reference evalsid invents results; the install says so first.
	if !strings.Contains(notes, "SIMULATED RESULTS: the reference evalsid runs no evaluator") {
		t.Errorf("the notes of an install with the reference evalsid do not say its results are simulated:\n%s", notes)
	}
	t.Cleanup(func() {
		helmErr(t, "uninstall", "evalsi-mtls", "-n", ns, "--no-hooks", "--kubeconfig="+env.Kubeconfig)
	})
	bin := clustertest.Operator(t)
	kubelet := &clustertest.Kubelet{Bin: bin, Deployments: []string{ns + "/evalsid", ns + "/evalsi-operator"}}
	kubelet.Start(t, ctx, env)
	kubelet.Settle(t, ctx)

	run := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
		"metadata": map[string]any{"name": "over-mtls", "namespace": ns},
		"spec": map[string]any{"suite": "smoke", "target": map[string]any{
			"endpoint": map[string]any{"url": "http://model:8000/v1", "model": "m"}}},
	}}
	runs := env.Dynamic().Resource(evalsi("evalruns")).Namespace(ns)
	if _, err := runs.Create(ctx, run, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the run created on evalsid over mutual TLS", func() error {
		got, err := runs.Get(ctx, "over-mtls", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if id, _, _ := unstructured.NestedString(got.Object, "status", "runId"); id == "" {
			return fmt.Errorf("no runId yet; Ready %s", readyOf(got))
		}
		// The in-chart evalsid is the reference one: the run's status says its result is made up.
		if sim, _, _ := unstructured.NestedBool(got.Object, "status", "simulated"); !sim || !strings.Contains(readyOf(got), "simulated") {
			return fmt.Errorf("status.simulated %v, Ready %s: want both to say simulated", sim, readyOf(got))
		}
		return nil
	})

	// A caller that trusts evalsid's CA but has no client certificate is refused.
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "evalsid." + ns + ".svc"}}}
	resp, err := noCert.Post("https://"+kubelet.Pod(ns + "/evalsid").Addrs["api"]+"/evalsi.v1.RunService/GetRun", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a call without a client certificate: %s, want 401", resp.Status)
	}
}
