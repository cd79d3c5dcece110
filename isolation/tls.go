package isolation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// verifyTLS says whether the server at address presents a certificate that caFile (the system's
// roots when empty) verifies for its host: "verified", or why not. A certificate of an unknown
// authority is named by its issuer, so that a pod handed no CA, or the wrong one, says which CA
// it lacks.
func verifyTLS(ctx context.Context, address, caFile string, timeout time.Duration) string {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err.Error()
	}
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	roots := "the system's roots"
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return "no CA: " + err.Error()
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return "no CA: " + caFile + " holds no PEM certificate"
		}
		roots = caFile
	}
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", address)
	if err == nil {
		conn.Close()
		return "verified"
	}
	var unknown x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) && len(verify.UnverifiedCertificates) > 0 && errors.As(err, &unknown) {
		return fmt.Sprintf("not verified: issued by %q, not a CA of %s", verify.UnverifiedCertificates[0].Issuer.String(), roots)
	}
	return "not verified: " + err.Error()
}
