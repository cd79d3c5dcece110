package webhook

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"testing"
	"time"

	"evals.si/operator/internal/pki"
)

// writeServingPair writes tls.crt and tls.key for name into dir and returns the serial.
func writeServingPair(t *testing.T, dir, name string) string {
	t.Helper()
	ca, caKey, err := pki.NewCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.NewLeaf(ca, caKey, x509.Certificate{Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// As the kubelet updates a mounted Secret: new files, swapped in.
	for file, data := range map[string][]byte{"tls.crt": pki.EncodeCert(cert), "tls.key": keyPEM} {
		tmp := filepath.Join(dir, "."+file)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
			t.Fatal(err)
		}
	}
	return cert.SerialNumber.String()
}

// TestCertDirIsReadAgainWhenRenewed serves the certificate of --cert-dir and the renewed one
// once cert-manager has replaced the files.
func TestCertDirIsReadAgainWhenRenewed(t *testing.T) {
	dir := t.TempDir()
	first := writeServingPair(t, dir, "evalsi-webhook.evalsi-system.svc")
	certs := &pki.Dir{Path: dir}
	serial := func() string {
		c, err := certs.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.String()
	}
	if got := serial(); got != first {
		t.Fatalf("serving %s, want %s", got, first)
	}
	second := writeServingPair(t, dir, "evalsi-webhook.evalsi-system.svc")
	// A later modification time, as a renewal has, even on a coarse clock.
	now := time.Now().Add(time.Second)
	os.Chtimes(filepath.Join(dir, "tls.crt"), now, now)
	if got := serial(); got != second {
		t.Errorf("serving %s after renewal, want the new %s", got, second)
	}
}
