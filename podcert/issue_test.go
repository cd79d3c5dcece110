package podcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"evals.si/operator/internal/pki"
)

// TestIssueChainsToTheBundle: a certificate issued by the signer verifies with the bundle it
// publishes, whether its CA is a root (the bundle holds it) or an intermediate under a root the
// bundle holds (a cert-manager CA Certificate under the platform's root), whose chain then
// carries the intermediate.
func TestIssueChainsToTheBundle(t *testing.T) {
	root, rootKey, err := pki.NewCA("platform-root", time.Hour*48)
	if err != nil {
		t.Fatal(err)
	}
	interKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "evalsi-workload-ca"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(47 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, root, &interKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	interPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	interKeyPEM, err := pki.EncodeKey(interKey)
	if err != nil {
		t.Fatal(err)
	}
	rootKeyPEM, err := pki.EncodeKey(rootKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string][]byte{
		"a root":                         {"tls.crt": pki.EncodeCert(root), "tls.key": rootKeyPEM},
		"an intermediate under the root": {"tls.crt": interPEM, "tls.key": interKeyPEM, "ca.crt": pki.EncodeCert(root)},
	} {
		t.Run(name, func(t *testing.T) {
			ca, err := ParseAuthority(data)
			if err != nil {
				t.Fatal(err)
			}
			issued, err := issue(&key.PublicKey, "team-a", "judge", 24*time.Hour, ca, Policy{Lifetime: 24 * time.Hour, TrustDomain: "cluster.local"}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			var certs []*x509.Certificate
			for rest := []byte(issued.Chain); ; {
				var b *pem.Block
				if b, rest = pem.Decode(rest); b == nil {
					break
				}
				c, err := x509.ParseCertificate(b.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				certs = append(certs, c)
			}
			roots, inter := x509.NewCertPool(), x509.NewCertPool()
			roots.AppendCertsFromPEM(ca.Bundle)
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("the issued chain (%d certificates) does not verify with the published bundle: %v", len(certs), err)
			}
		})
	}
}
