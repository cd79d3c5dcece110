package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestExpiryReportsEachCertificateAsItIsNow: each file's first certificate's notAfter, by name;
// a renewed file reports its new certificate at the next scrape; a missing file or one without a
// certificate reports nothing.
func TestExpiryReportsEachCertificateAsItIsNow(t *testing.T) {
	dir := t.TempDir()
	ca, key, err := NewCA("test CA", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, validFor time.Duration) time.Time {
		t.Helper()
		leaf, _, err := NewLeaf(ca, key, x509.Certificate{Subject: pkix.Name{CommonName: name}}, validFor)
		if err != nil {
			t.Fatal(err)
		}
		// The leaf first, then its CA, as a tls.crt holds them.
		if err := os.WriteFile(filepath.Join(dir, name), append(EncodeCert(leaf), EncodeCert(ca)...), 0o600); err != nil {
			t.Fatal(err)
		}
		return leaf.NotAfter
	}
	metrics := write("metrics.crt", time.Hour)
	if err := os.WriteFile(filepath.Join(dir, "empty.crt"), []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := Expiry{"metrics": filepath.Join(dir, "metrics.crt"), "evalsid-ca": filepath.Join(dir, "missing.crt"), "evalsid-client": filepath.Join(dir, "empty.crt")}
	want := func(notAfter time.Time) string {
		return fmt.Sprintf(`# HELP evalsi_certificate_expiry_timestamp_seconds %s
# TYPE evalsi_certificate_expiry_timestamp_seconds gauge
evalsi_certificate_expiry_timestamp_seconds{certificate="metrics"} %d
`, expiryHelp, notAfter.Unix())
	}
	if err := testutil.CollectAndCompare(e, strings.NewReader(want(metrics))); err != nil {
		t.Error(err)
	}
	renewed := write("metrics.crt", 12*time.Hour)
	if err := testutil.CollectAndCompare(e, strings.NewReader(want(renewed))); err != nil {
		t.Errorf("after the renewal: %v", err)
	}
}
