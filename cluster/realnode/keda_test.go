package realnode_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	"evals.si/operator/internal/checkout"
	"evals.si/operator/internal/pki"
	"evals.si/operator/podcert"
)

// TestKEDAScalesARealPool has KEDA (its operator and admission webhooks, as processes beside the
// node) scale an Evaluator's pool on the real node from zero to one and back, reading the pool's
// queue from an evalsid of a private CA on the node's address that requires every caller's
// client certificate: KEDA trusts the CA through its --ca-dir, as the install guide says to mount
// it, and signs in as the platform's queue reader (its ClusterTriggerAuthentication: a token it
// mints for keda/evalsi-queue-reader, and that account's certificate, which the workload signer
// keeps in a Secret of KEDA's namespace). The pod KEDA's scale-up starts runs the pool image the
// kubelet pulled by digest, with its projected token, the CA and its own certificate from the
// signer, signs in with them, and reaches evalsid through its NetworkPolicy; after the queue
// empties and the cooldown passes, no pod is left.
func TestKEDAScalesARealPool(t *testing.T) {
	c, node := realNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs := c.Clientset()
	const ns = "autoscale"
	const reader, readerSecret = "evalsi-queue-reader", "evalsi-queue-reader-tls"
	images := pushImages(t, ctx, node)
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.InstallCRDs(ctx, filepath.Join(root, "chart", "evalsi-crds", "files", "crds")); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// evalsid on the node's address, with a certificate of a CA of the test's.
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := evalsidCertificate(t)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caDir := filepath.Join(dir, "ca")
	if err := os.Mkdir(caDir, 0o755); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(caDir, "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// KEDA, minting tokens of the platform's queue reader in its own namespace.
	if err := c.StartKeda(ctx, []cluster.KedaTokenAudience{{Audience: evalsi.DefaultTokenAudience, Namespace: cluster.KedaNamespace, ServiceAccountName: reader}}, caDir); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(cluster.KedaNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reader}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The platform's workload signer (evalsi-crds's, here in the test's process): the pools'
	// certificates, and the queue reader's in a Secret of KEDA's namespace.
	signer := &podcert.Signer{Client: cs, Name: evalsi.WorkloadSigner, CA: podcert.CASecret{Client: cs, Namespace: ns, Name: "evalsi-workload-ca"},
		Policy:  podcert.Policy{Lifetime: 24 * time.Hour, TrustDomain: "cluster.local"},
		Secrets: []podcert.SecretCertificate{{Namespace: cluster.KedaNamespace, Secret: readerSecret, ServiceAccount: reader}},
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil))}
	signed := make(chan error, 1)
	signerCtx, stopSigner := context.WithCancel(ctx)
	go func() { signed <- signer.Run(signerCtx, 2, time.Second) }()
	t.Cleanup(func() { stopSigner(); <-signed })
	var workloadCA *podcert.Authority
	clustertest.Eventually(t, ctx, "the signer's CA", func() error {
		workloadCA, err = signer.CA.Read(ctx)
		return err
	})
	clients := x509.NewCertPool()
	clients.AddCert(workloadCA.Cert)
	if _, err := c.Dynamic().Resource(schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "clustertriggerauthentications"}).Create(ctx,
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "keda.sh/v1alpha1", "kind": "ClusterTriggerAuthentication",
			"metadata": map[string]any{"name": reader},
			"spec": map[string]any{
				"boundServiceAccountToken": []any{map[string]any{"parameter": "token", "serviceAccountName": reader}},
				"secretTargetRef": []any{
					map[string]any{"parameter": "cert", "name": readerSecret, "key": "tls.crt"},
					map[string]any{"parameter": "key", "name": readerSecret, "key": "tls.key"},
				}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	operator := "system:serviceaccount:" + ns + ":evalsi-operator"
	api := evalsid.New(map[string]string{"operator-token": operator}, evalsid.DefaultSchedule)
	api.TrustKubernetes(&evalsid.KubernetesIssuer{APIServer: c.Config.Host, Client: hc, Audience: evalsi.DefaultTokenAudience})
	api.TrustQueueReader(evalsi.ServiceAccountIdentity(cluster.KedaNamespace, reader))
	l, err := net.Listen("tcp", "10.88.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	go api.ServeTLS(ctx, l, &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: clients})
	apiURL := "https://" + l.Addr().String()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "evalsid-ca", Namespace: ns}, Data: map[string][]byte{"ca.crt": caPEM}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The operator's own client certificate, as cert-manager would issue it from the same CA.
	opCert, opKey, err := pki.NewLeafPEM(workloadCA.Cert, workloadCA.Key.(*ecdsa.PrivateKey), x509.Certificate{
		Subject: pkix.Name{CommonName: operator}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"token": []byte("operator-token"), "client.crt": opCert, "client.key": opKey}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	runOperator(t, c, "--namespace="+ns, "--controllers=evaluator", "--discovery-interval=1s", "--api-url="+apiURL,
		"--api-ca-file="+caFile, "--api-ca-secret=evalsid-ca", "--api-token-file="+filepath.Join(dir, "token"),
		"--api-client-cert="+filepath.Join(dir, "client.crt"), "--api-client-key="+filepath.Join(dir, "client.key"),
		"--workload-certificate-signer="+evalsi.WorkloadSigner, "--keda-cluster-authentication="+reader,
		"--default-image="+images.PoolImage())

	evaluator := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": "judge", "namespace": ns},
		"spec": map[string]any{"autoscaling": map[string]any{
			"minReplicas": int64(0), "maxReplicas": int64(1), "targetQueueDepth": int64(2),
			"pollingInterval": "1s", "cooldownPeriod": "3s",
		}},
	}}
	if _, err := c.Dynamic().Resource(evalsi.Evaluators).Namespace(ns).Create(ctx, evaluator, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := func(want int) func() error {
		return func() error {
			list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=evaluator,app.kubernetes.io/instance=judge"})
			if err != nil {
				return err
			}
			ready := 0
			for _, p := range list.Items {
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if len(list.Items) != want || ready != want {
				return fmt.Errorf("%d pods, %d Ready, want %d; %s", len(list.Items), ready, want, notReady(ctx, c))
			}
			return nil
		}
	}
	clustertest.Eventually(t, ctx, "KEDA's ScaledObject Ready and the idle pool at zero pods", func() error {
		so, err := c.Dynamic().Resource(evalsi.ScaledObjects).Namespace(ns).Get(ctx, "judge-evaluator", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := readyCondition(so); !strings.HasPrefix(got, "True") {
			return fmt.Errorf("ScaledObject Ready %s", got)
		}
		return pods(0)()
	})

	api.SetQueueDepth(ns, v1.PoolKind_POOL_KIND_EVALUATOR, "judge", 5)
	clustertest.Eventually(t, ctx, "KEDA starts a pool pod when the queue fills", pods(1))
	token, signIn, result := standInReport(t, ctx, c, ns, "app.kubernetes.io/name=evaluator,app.kubernetes.io/instance=judge", "evaluator")
	if !strings.Contains(signIn, "certificate: system:serviceaccount:"+ns+":judge-evaluator") || !strings.Contains(signIn, "evalsid: signed in") {
		t.Errorf("the pool's sign-in says %q, want its own certificate and its token accepted", signIn)
	}
	if !strings.Contains(token, "token present") {
		t.Errorf("the pool pod KEDA started says %q, want its projected token", token)
	}
	if got := result.Report.Reach["evalsid"]; !got.Reachable || got.TLS != "verified" {
		t.Errorf("the pool pod KEDA started: evalsid %+v, want it reachable and verified with the CA it was handed", got)
	}
	api.SetQueueDepth(ns, v1.PoolKind_POOL_KIND_EVALUATOR, "judge", 0)
	clustertest.Eventually(t, ctx, "KEDA scales the pool back to zero pods after the cooldown", pods(0))

	reads := 0
	for _, call := range api.CallLog() {
		if call.Method != "GetQueueDepth" {
			continue
		}
		if call.Code != 0 {
			t.Errorf("KEDA's queue read failed with %v: its trust of the CA, its token, its certificate or the URL is wrong", call.Code)
			break
		}
		reads++
	}
	if reads == 0 {
		t.Error("KEDA never read the queue")
	}
}
