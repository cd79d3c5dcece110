package podcert

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"time"

	certv1 "k8s.io/api/certificates/v1"

	"evals.si/operator/evalsi"
)

// Policy is how long the signer's certificates live and when kubelets should renew them.
type Policy struct {
	// Lifetime is a certificate's lifetime, shortened to the request's maxExpirationSeconds and
	// to the CA's own expiry; the API server refuses one under an hour.
	Lifetime time.Duration
	// TrustDomain is the SPIFFE trust domain of the certificates' URIs.
	TrustDomain string
}

// Issued is a certificate issued for a request, as its status carries it.
type Issued struct {
	Chain                          string
	NotBefore, NotAfter, RefreshAt time.Time
}

// minLifetime is the shortest certificate the API server accepts for a PodCertificateRequest.
const minLifetime = time.Hour

// Issue signs the certificate that req asks for, at now: the key of its stub CSR, the identity
// of its pod's service account, for client authentication. It is refused (an error, which the
// signer reports as the request's Failed condition) when the CSR does not parse or the
// certificate would live less than the API server's minimum, as it would near the CA's expiry.
func Issue(req *certv1.PodCertificateRequest, ca *Authority, policy Policy, now time.Time) (Issued, error) {
	csr, err := x509.ParseCertificateRequest(req.Spec.StubPKCS10Request)
	if err != nil {
		return Issued{}, fmt.Errorf("spec.stubPKCS10Request: %w", err)
	}
	lifetime := policy.Lifetime
	if max := req.Spec.MaxExpirationSeconds; max != nil && time.Duration(*max)*time.Second < lifetime {
		lifetime = time.Duration(*max) * time.Second
	}
	return issue(csr.PublicKey, req.Namespace, req.Spec.ServiceAccountName, lifetime, ca, policy, now)
}

// issue signs a certificate of key for the service account namespace/sa, of lifetime at most,
// for client authentication.
func issue(key any, ns, sa string, lifetime time.Duration, ca *Authority, policy Policy, now time.Time) (Issued, error) {
	// metav1.Time keeps seconds: the status's times must equal the certificate's.
	notBefore := now.Truncate(time.Second)
	notAfter := notBefore.Add(lifetime)
	if ca.Cert.NotAfter.Before(notAfter) {
		notAfter = ca.Cert.NotAfter.Truncate(time.Second)
	}
	if notAfter.Sub(notBefore) < minLifetime {
		return Issued{}, fmt.Errorf("the signer's CA expires at %s, too soon to issue a certificate of an hour: rotate the CA", ca.Cert.NotAfter.Format(time.RFC3339))
	}
	spiffe := &url.URL{Scheme: "spiffe", Host: policy.TrustDomain, Path: "/ns/" + ns + "/sa/" + sa}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return Issued{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: evalsi.ServiceAccountIdentity(ns, sa)},
		URIs:         []*url.URL{spiffe},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key, ca.Key)
	if err != nil {
		return Issued{}, fmt.Errorf("signing for %s/%s: %w", ns, sa, err)
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if !bytes.Equal(ca.Cert.RawIssuer, ca.Cert.RawSubject) {
		// An intermediate CA (cert-manager's CA Certificate under the platform's root): the chain
		// carries it, so that the root the bundle publishes verifies the certificate.
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})...)
	}
	// Kubelets renew at two thirds of the lifetime; the API server wants it 10 minutes inside.
	return Issued{
		Chain:     string(chain),
		NotBefore: notBefore,
		NotAfter:  notAfter,
		RefreshAt: notBefore.Add(notAfter.Sub(notBefore) * 2 / 3).Truncate(time.Second),
	}, nil
}
