package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"time"

	"evals.si/operator/internal/pki"
)

// certFiles are the files of the control plane's certificate authority, serving certificate, admin
// client certificate and service-account signing key.
type certFiles struct {
	CACert, CAKey           string
	ServingCert, ServingKey string
	AdminCert, AdminKey     string
	SAKey, SAPub            string
	// WebhookClientCert and WebhookClientKey are what the API server presents to admission
	// webhooks (common name WebhookClientName), signed by a CA of their own, WebhookClientCA,
	// which nothing else uses: a webhook that trusts it trusts the API server alone.
	WebhookClientCA, WebhookClientCert, WebhookClientKey string
}

// WebhookClientName is the common name of the API server's client certificate for webhooks.
const WebhookClientName = "kube-apiserver-webhook-client"

// writePKI creates a fresh CA, a serving certificate for loopback, an admin client certificate in
// system:masters and a service-account key pair under dir.
func writePKI(dir string) (certFiles, error) {
	p := certFiles{
		CACert: filepath.Join(dir, "ca.crt"), CAKey: filepath.Join(dir, "ca.key"),
		ServingCert: filepath.Join(dir, "apiserver.crt"), ServingKey: filepath.Join(dir, "apiserver.key"),
		AdminCert: filepath.Join(dir, "admin.crt"), AdminKey: filepath.Join(dir, "admin.key"),
		SAKey: filepath.Join(dir, "sa.key"), SAPub: filepath.Join(dir, "sa.pub"),
		WebhookClientCA:   filepath.Join(dir, "webhook-client-ca.crt"),
		WebhookClientCert: filepath.Join(dir, "webhook-client.crt"), WebhookClientKey: filepath.Join(dir, "webhook-client.key"),
	}
	ca, caKey, err := pki.NewCA("evalsi-test-ca", 24*time.Hour)
	if err != nil {
		return p, err
	}
	if err := writeCertKey(p.CACert, p.CAKey, ca, caKey); err != nil {
		return p, err
	}
	serving, servingKey, err := pki.NewLeaf(ca, caKey, x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1"), net.ParseIP(realNodeIP)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, 24*time.Hour)
	if err != nil {
		return p, err
	}
	if err := writeCertKey(p.ServingCert, p.ServingKey, serving, servingKey); err != nil {
		return p, err
	}
	admin, adminKey, err := pki.NewLeaf(ca, caKey, x509.Certificate{
		Subject:     pkix.Name{CommonName: "evalsi-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, 24*time.Hour)
	if err != nil {
		return p, err
	}
	if err := writeCertKey(p.AdminCert, p.AdminKey, admin, adminKey); err != nil {
		return p, err
	}
	if err := writeWebhookClient(p); err != nil {
		return p, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	if err := writeKey(p.SAKey, saKey); err != nil {
		return p, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return p, err
	}
	return p, os.WriteFile(p.SAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func writeCertKey(certPath, keyPath string, cert *x509.Certificate, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(certPath, pki.EncodeCert(cert), 0o644); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	data, err := pki.EncodeKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// writeWebhookClient makes the API server's client certificate for webhooks, under a CA of its own.
func writeWebhookClient(p certFiles) error {
	ca, caKey, err := pki.NewCA("evalsi-test-webhook-client-ca", 24*time.Hour)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.WebhookClientCA, pki.EncodeCert(ca), 0o644); err != nil {
		return err
	}
	cert, key, err := pki.NewLeaf(ca, caKey, x509.Certificate{
		Subject:     pkix.Name{CommonName: WebhookClientName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, 24*time.Hour)
	if err != nil {
		return err
	}
	return writeCertKey(p.WebhookClientCert, p.WebhookClientKey, cert, key)
}

// writeNodeKubeconfig writes a kubeconfig at path for the kubelet of node name, with a client
// certificate of the cluster's CA as a node identifies itself (system:node:<name> in
// system:nodes), so that the Node authorizer and NodeRestriction hold it as they hold a kubelet
// of a production cluster: its own Node, its own pods' objects, certificate requests for its
// own pods only.
func writeNodeKubeconfig(p certFiles, server, name, path string) error {
	pair, err := tls.LoadX509KeyPair(p.CACert, p.CAKey)
	if err != nil {
		return err
	}
	cert, key, err := pki.NewLeaf(pair.Leaf, pair.PrivateKey.(*ecdsa.PrivateKey), x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, 24*time.Hour)
	if err != nil {
		return err
	}
	certPath, keyPath := path+".crt", path+".key"
	if err := writeCertKey(certPath, keyPath, cert, key); err != nil {
		return err
	}
	return writeKubeconfigFile(path, server, p.CACert, "node", certPath, keyPath)
}
