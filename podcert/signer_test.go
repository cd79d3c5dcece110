package podcert_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/pki"
	"evals.si/operator/podcert"
)

var shared = clustertest.New(cluster.Options{})

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// newCA returns a new CA as a Secret's data, with bundle before it as ca.crt when not nil.
func newCA(t *testing.T, name string, bundle []byte) (*x509.Certificate, map[string][]byte) {
	t.Helper()
	ca, key, err := pki.NewCA(name, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{"tls.crt": pki.EncodeCert(ca), "tls.key": keyPEM}
	if bundle != nil {
		data["ca.crt"] = append(bundle, pki.EncodeCert(ca)...)
	}
	return ca, data
}

// as is a client of the cluster acting as user in groups.
func as(t *testing.T, c *cluster.Cluster, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	return kubernetes.NewForConfigOrDie(cfg)
}

// TestSignerIssuesThePodsIdentity runs the signer against the real API server and asks it for
// certificates as kubelets do (impersonating the pod's node, which the Node authorizer and
// NodeRestriction hold to its own pods): what it issues names the pod's service account and
// verifies with the CA it made at its start and publishes; a CA rotated in its Secret signs the
// next request and is published beside the old one, without a restart. The certificate it keeps
// in a Secret (KEDA's queue reader's) names its account and is issued again by the new CA. Nobody else gets a request past the API
// server: a namespace editor, or another node, asking for the pod's certificate.
func TestSignerIssuesThePodsIdentity(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := c.Clientset()
	ns := "podcert-team"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "judge"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "carol-edits"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "carol"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*corev1.Node{}
	for _, name := range []string{"podcert-node-a", "podcert-node-b"} {
		n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = n
	}
	sa, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "judge", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "judge-0"},
		Spec: corev1.PodSpec{NodeName: "podcert-node-a", ServiceAccountName: "judge", AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "evaluator", Image: "evaluator"}},
			Volumes: []corev1.Volume{{Name: "identity", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{
					SignerName: evalsi.WorkloadSigner, KeyType: "ECDSAP256", CredentialBundlePath: "credentials.pem"}}}}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	caSecret := podcert.CASecret{Client: admin, Namespace: ns, Name: "evalsi-workload-ca"}
	readerSecret := podcert.SecretCertificate{Namespace: ns, Secret: "queue-reader-tls", ServiceAccount: "evalsi-queue-reader"}
	signer := &podcert.Signer{Client: admin, Name: evalsi.WorkloadSigner, CA: caSecret, Secrets: []podcert.SecretCertificate{readerSecret},
		Policy: podcert.Policy{Lifetime: 24 * time.Hour, TrustDomain: "cluster.local"},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	go func() { done <- signer.Run(sctx, 1, 200*time.Millisecond) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the signer: %v", err)
		}
	}()

	request := func(client kubernetes.Interface, node *corev1.Node, name string, maxSeconds int32) (*certv1.PodCertificateRequest, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
		if err != nil {
			t.Fatal(err)
		}
		return client.CertificatesV1().PodCertificateRequests(ns).Create(ctx, &certv1.PodCertificateRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certv1.PodCertificateRequestSpec{
				SignerName: evalsi.WorkloadSigner, PodName: pod.Name, PodUID: pod.UID,
				ServiceAccountName: sa.Name, ServiceAccountUID: sa.UID,
				NodeName: "podcert-node-a", NodeUID: node.UID,
				MaxExpirationSeconds: &maxSeconds, StubPKCS10Request: csr,
			},
		}, metav1.CreateOptions{})
	}
	issued := func(name string) *x509.Certificate {
		t.Helper()
		var leaf *x509.Certificate
		clustertest.Eventually(t, ctx, "PodCertificateRequest "+name+" issued", func() error {
			r, err := admin.CertificatesV1().PodCertificateRequests(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(r.Status.Conditions, certv1.PodCertificateRequestConditionTypeIssued) {
				return fmt.Errorf("conditions %+v", r.Status.Conditions)
			}
			leaf, err = x509.ParseCertificate(pemBlock(t, []byte(r.Status.CertificateChain)))
			return err
		})
		return leaf
	}
	bundle := func(want int) *x509.CertPool {
		t.Helper()
		pool := x509.NewCertPool()
		clustertest.Eventually(t, ctx, fmt.Sprintf("the ClusterTrustBundle with %d CAs", want), func() error {
			b, err := admin.CertificatesV1().ClusterTrustBundles().Get(ctx, podcert.TrustBundleName(evalsi.WorkloadSigner), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got := strings.Count(b.Spec.TrustBundle, "BEGIN CERTIFICATE"); got != want {
				return fmt.Errorf("%d certificates", got)
			}
			pool = x509.NewCertPool()
			pool.AppendCertsFromPEM([]byte(b.Spec.TrustBundle))
			return nil
		})
		return pool
	}

	// secretCertificate waits until the queue reader's Secret holds a certificate issued by issuer.
	secretCertificate := func(issuer string) *x509.Certificate {
		t.Helper()
		var leaf *x509.Certificate
		clustertest.Eventually(t, ctx, "the queue reader's Secret certificate of "+issuer, func() error {
			sec, err := admin.CoreV1().Secrets(ns).Get(ctx, readerSecret.Secret, metav1.GetOptions{})
			if err != nil {
				return err
			}
			pair, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
			if err != nil {
				return err
			}
			if leaf = pair.Leaf; leaf.Issuer.CommonName != issuer {
				return fmt.Errorf("issued by %s", leaf.Issuer.CommonName)
			}
			return nil
		})
		return leaf
	}
	if got := secretCertificate("evalsi-workload-ca"); got.Subject.CommonName != "system:serviceaccount:"+ns+":evalsi-queue-reader" {
		t.Errorf("the Secret's certificate names %q, want the queue reader's account", got.Subject.CommonName)
	}

	node := as(t, c, "system:node:podcert-node-a", "system:nodes")
	if _, err := request(node, nodes["podcert-node-a"], "judge-0-1", 86400); err != nil {
		t.Fatalf("the pod's node asking for its certificate: %v", err)
	}
	leaf := issued("judge-0-1")
	if want := "system:serviceaccount:" + ns + ":judge"; leaf.Subject.CommonName != want {
		t.Errorf("common name %q, want %q", leaf.Subject.CommonName, want)
	}
	if leaf.Issuer.CommonName != "evalsi-workload-ca" {
		t.Errorf("issuer %q, want the CA the signer made at its start", leaf.Issuer.CommonName)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/ns/"+ns+"/sa/judge" {
		t.Errorf("URIs %v, want the SPIFFE id of the pod's service account", leaf.URIs)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 24*time.Hour {
		t.Errorf("lifetime %v, want 24h", got)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: bundle(1), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the certificate does not verify with the published CA: %v", err)
	}

	// A request's maxExpirationSeconds shortens the certificate.
	if _, err := request(node, nodes["podcert-node-a"], "judge-0-2", 3600); err != nil {
		t.Fatal(err)
	}
	if got := issued("judge-0-2"); got.NotAfter.Sub(got.NotBefore) != time.Hour {
		t.Errorf("lifetime %v for a request of at most 3600 s, want 1h", got.NotAfter.Sub(got.NotBefore))
	}

	// The attackers: the namespace's admin, and another node, asking for the pod's certificate.
	for who, client := range map[string]kubernetes.Interface{
		"the namespace's admin": as(t, c, "carol"),
		"another node":          as(t, c, "system:node:podcert-node-b", "system:nodes"),
	} {
		_, err := request(client, nodes["podcert-node-a"], "forged", 86400)
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s asking for the pod's certificate: %v, want Forbidden", who, err)
		}
	}

	// A rotated CA: the new one signs, both are published (ca.crt), no restart.
	made, err := admin.CoreV1().Secrets(ns).Get(ctx, caSecret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the CA Secret the signer made: %v", err)
	}
	first, err := x509.ParseCertificate(pemBlock(t, made.Data["tls.crt"]))
	if err != nil {
		t.Fatal(err)
	}
	second, data := newCA(t, "evalsi-workload-ca-2", made.Data["tls.crt"])
	made.Data = data
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, made, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	roots := bundle(2)
	if _, err := request(node, nodes["podcert-node-a"], "judge-0-3", 86400); err != nil {
		t.Fatal(err)
	}
	rotated := issued("judge-0-3")
	secretCertificate(second.Subject.CommonName) // issued again by the new CA
	if rotated.Issuer.CommonName != second.Subject.CommonName {
		t.Errorf("after the rotation the issuer is %q, want the new CA %q", rotated.Issuer.CommonName, second.Subject.CommonName)
	}
	if leaf.Issuer.CommonName != first.Subject.CommonName {
		t.Errorf("the first certificate's issuer %q is not the Secret's CA %q", leaf.Issuer.CommonName, first.Subject.CommonName)
	}
	for _, cert := range []*x509.Certificate{leaf, rotated} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("a certificate of %s does not verify with the bundle published during the rotation: %v", cert.Issuer.CommonName, err)
		}
	}
}

// pemBlock is the first PEM block of data.
func pemBlock(t *testing.T, data []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM in %q", data)
	}
	return block.Bytes
}

// TestSignerReadyOnlyWhileItCanSign asks the signer's readiness (its /readyz) as the kubelet
// would: not ready before it takes requests; ready once it does; not ready, naming the CA,
// while its CA's Secret is gone (it makes no second CA behind the back of those who trust the
// first); ready again once the Secret is back.
func TestSignerReadyOnlyWhileItCanSign(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := c.Clientset()
	ns := "podcert-ready"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	signer := &podcert.Signer{Client: admin, Name: "evals.si/ready-test", CA: podcert.CASecret{Client: admin, Namespace: ns, Name: "ca"},
		Policy: podcert.Policy{Lifetime: 24 * time.Hour, TrustDomain: "cluster.local"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := signer.Ready(ctx); err == nil || !strings.Contains(err.Error(), "not signing yet") {
		t.Errorf("before it runs: %v, want not signing yet", err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- signer.Run(sctx, 1, time.Second) }()
	defer func() { stop(); clustertest.Await(t, "the signer", done) }()
	clustertest.Eventually(t, ctx, "the signer ready", func() error { return signer.Ready(ctx) })
	secret, err := admin.CoreV1().Secrets(ns).Get(ctx, "ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Secrets(ns).Delete(ctx, "ca", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := signer.Ready(ctx); err == nil || !strings.Contains(err.Error(), "the CA cannot be read") {
		t.Errorf("with its CA's Secret gone: %v, want the CA named", err)
	}
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Data: secret.Data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := signer.Ready(ctx); err != nil {
		t.Errorf("with its CA back: %v", err)
	}
}
