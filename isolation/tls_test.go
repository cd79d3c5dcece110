package isolation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"evals.si/operator/internal/pki"
)

// TestVerifyTLSNamesTheCAAPodLacks serves TLS with a certificate of a private CA on loopback and
// verifies it as a pool's probe does: with the CA the pod was handed, with another CA, and with
// none (the system's roots). Each miss names the issuer the pod lacks.
func TestVerifyTLSNamesTheCAAPodLacks(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, err := pki.NewCA("platform evalsid CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := pki.NewCA("some other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for file, cert := range map[string]*x509.Certificate{"evalsid-ca.crt": ca, "other-ca.crt": other} {
		if err := os.WriteFile(filepath.Join(dir, file), pki.EncodeCert(cert), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	leaf, leafKey, err := pki.NewLeaf(ca, caKey, x509.Certificate{Subject: pkix.Name{CommonName: "evalsid"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Raw}, PrivateKey: leafKey}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	const unknown = `not verified: issued by "CN=platform evalsid CA", not a CA of `
	for name, tc := range map[string]struct{ caFile, want string }{
		"the CA the pod was handed": {filepath.Join(dir, "evalsid-ca.crt"), "verified"},
		"another CA":                {filepath.Join(dir, "other-ca.crt"), unknown + filepath.Join(dir, "other-ca.crt")},
		"no CA":                     {"", unknown + "the system's roots"},
		"a CA file that is missing": {filepath.Join(dir, "absent.crt"), "no CA: open " + filepath.Join(dir, "absent.crt") + ": no such file or directory"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := verifyTLS(context.Background(), l.Addr().String(), tc.caFile, 3*time.Second); got != tc.want {
				t.Errorf("verifyTLS = %q, want %q", got, tc.want)
			}
		})
	}
}
