package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/pki"
)

// certSource gives the serving certificate of each TLS handshake.
type certSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// SelfSigned configures certificates that the webhook manages itself.
type SelfSigned struct {
	Kube kubernetes.Interface
	// Namespace and Secret hold the CA and serving certificate, shared by every replica.
	Namespace, Secret string
	// Hosts are the serving certificate's DNS names and IP addresses.
	Hosts []string
	// ValidatingConfig and MutatingConfig are the webhook configurations whose caBundle is kept
	// current.
	ValidatingConfig, MutatingConfig string
	// Validity is the serving certificate's lifetime (the CA lives four times as long); a
	// certificate is renewed when a third of its lifetime is left.
	Validity time.Duration
}

// selfSignedCerts is the current serving certificate of a SelfSigned configuration.
type selfSignedCerts struct {
	cfg  SelfSigned
	cert atomic.Pointer[tls.Certificate]
}

func (s *selfSignedCerts) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.cert.Load(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("no serving certificate yet")
}

// Secret keys of the self-signed material.
const (
	keyCACert = "ca.crt"
	keyCAKey  = "ca.key"
	keyCert   = "tls.crt"
	keyKey    = "tls.key"
	// keyBundle is every CA that clients should trust: the current one, and the previous one
	// until certificates it signed have expired.
	keyBundle = "ca-bundle.crt"
)

// sync makes the Secret hold a CA and a serving certificate with time left, patches the
// configurations' caBundle, and serves the certificate. Replicas race benignly: when another
// replica wrote the Secret first, it is read back and used, a bounded number of times
// (retry.DefaultRetry) so that a Secret someone keeps changing cannot loop this forever.
func (s *selfSignedCerts) sync(ctx context.Context) error {
	return retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error { return s.syncOnce(ctx) })
}

// syncOnce is one attempt of sync; it returns the conflict when another replica wrote first.
func (s *selfSignedCerts) syncOnce(ctx context.Context) error {
	secrets := s.cfg.Kube.CoreV1().Secrets(s.cfg.Namespace)
	sec, err := secrets.Get(ctx, s.cfg.Secret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.cfg.Secret, Namespace: s.cfg.Namespace,
			Labels: map[string]string{evalsi.LabelManagedBy: evalsi.ManagedBy}}, Type: corev1.SecretTypeOpaque}
	} else if err != nil {
		return fmt.Errorf("reading Secret %s/%s: %w", s.cfg.Namespace, s.cfg.Secret, err)
	}
	next, changed, err := s.renew(sec.Data, time.Now())
	if err != nil {
		return err
	}
	if changed {
		sec.Data = next
		if sec.ResourceVersion == "" {
			_, err = secrets.Create(ctx, sec, metav1.CreateOptions{FieldManager: evalsi.FieldManager})
		} else {
			_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{FieldManager: evalsi.FieldManager})
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			return err // another replica renewed first: sync reads its certificates back
		}
		if err != nil {
			return fmt.Errorf("writing Secret %s/%s: %w", s.cfg.Namespace, s.cfg.Secret, err)
		}
	}
	cert, err := tls.X509KeyPair(next[keyCert], next[keyKey])
	if err != nil {
		return fmt.Errorf("loading the serving certificate: %w", err)
	}
	if err := s.patchCABundle(ctx, next[keyBundle]); err != nil {
		return err
	}
	s.cert.Store(&cert)
	return nil
}

// renew returns the Secret data with a CA and serving certificate that have at least a third of
// their lifetime left, and whether anything changed.
func (s *selfSignedCerts) renew(data map[string][]byte, now time.Time) (map[string][]byte, bool, error) {
	ca, caKey, caErr := parsePair(data[keyCACert], data[keyCAKey])
	caLife := 4 * s.cfg.Validity
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = v
	}
	changed := false
	if caErr != nil || timeLeft(ca, now) < caLife/3 {
		newCA, newKey, err := pki.NewCA("evalsi-webhook-ca", caLife)
		if err != nil {
			return nil, false, err
		}
		keyPEM, err := pki.EncodeKey(newKey)
		if err != nil {
			return nil, false, err
		}
		bundle := pki.EncodeCert(newCA)
		if caErr == nil && ca.NotAfter.After(now) {
			bundle = append(bundle, pki.EncodeCert(ca)...)
		}
		out[keyCACert], out[keyCAKey], out[keyBundle] = pki.EncodeCert(newCA), keyPEM, bundle
		ca, caKey, changed = newCA, newKey, true
		delete(out, keyCert) // re-sign the serving certificate with the new CA
	}
	leaf, _, leafErr := parsePair(out[keyCert], out[keyKey])
	if leafErr != nil || timeLeft(leaf, now) < s.cfg.Validity/3 || !signedBy(leaf, ca) {
		tmpl := x509.Certificate{
			Subject:     pkix.Name{CommonName: s.cfg.Hosts[0]},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		for _, h := range s.cfg.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		cert, key, err := pki.NewLeaf(ca, caKey, tmpl, s.cfg.Validity)
		if err != nil {
			return nil, false, err
		}
		keyPEM, err := pki.EncodeKey(key)
		if err != nil {
			return nil, false, err
		}
		out[keyCert], out[keyKey], changed = pki.EncodeCert(cert), keyPEM, true
	}
	if len(out[keyBundle]) == 0 {
		out[keyBundle], changed = out[keyCACert], true
	}
	return out, changed, nil
}

// timeLeft returns how long cert has left.
func timeLeft(cert *x509.Certificate, now time.Time) time.Duration { return cert.NotAfter.Sub(now) }

func signedBy(leaf, ca *x509.Certificate) bool { return leaf.CheckSignatureFrom(ca) == nil }

// parsePair parses a PEM certificate and its EC key.
func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("not an EC key")
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	return cert, key, err
}

// patchCABundle sets caBundle on every webhook of the two configurations, when it differs.
func (s *selfSignedCerts) patchCABundle(ctx context.Context, bundle []byte) error {
	ar := s.cfg.Kube.AdmissionregistrationV1()
	if name := s.cfg.ValidatingConfig; name != "" {
		cfg, err := ar.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", name, err)
		}
		var clients []*admissionregistrationv1.WebhookClientConfig
		for i := range cfg.Webhooks {
			clients = append(clients, &cfg.Webhooks[i].ClientConfig)
		}
		if setBundle(bundle, clients) {
			if _, err := ar.ValidatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{FieldManager: evalsi.FieldManager}); err != nil {
				return fmt.Errorf("patching the caBundle of %s: %w", name, err)
			}
		}
	}
	if name := s.cfg.MutatingConfig; name != "" {
		cfg, err := ar.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", name, err)
		}
		var clients []*admissionregistrationv1.WebhookClientConfig
		for i := range cfg.Webhooks {
			clients = append(clients, &cfg.Webhooks[i].ClientConfig)
		}
		if setBundle(bundle, clients) {
			if _, err := ar.MutatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{FieldManager: evalsi.FieldManager}); err != nil {
				return fmt.Errorf("patching the caBundle of %s: %w", name, err)
			}
		}
	}
	return nil
}

// setBundle sets bundle as the caBundle of each client configuration and reports whether any
// changed (nothing is written otherwise).
func setBundle(bundle []byte, clients []*admissionregistrationv1.WebhookClientConfig) bool {
	changed := false
	for _, c := range clients {
		if !bytes.Equal(c.CABundle, bundle) {
			c.CABundle, changed = bundle, true
		}
	}
	return changed
}
