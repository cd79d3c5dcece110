package podcert

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/pki"
)

// Authority is the CA that signs workload certificates, and the bundle published for them.
type Authority struct {
	Cert   *x509.Certificate
	Key    crypto.Signer
	Bundle []byte
}

// CASecret is the Secret that holds the signer's CA: tls.crt and tls.key sign; ca.crt, when
// present, is the bundle to publish (it must verify tls.crt), else tls.crt is. It is read at
// each request, so a rotated CA signs without a restart.
type CASecret struct {
	Client          kubernetes.Interface
	Namespace, Name string
}

// caLifetime is the lifetime of the CA the signer makes when its Secret does not exist.
const caLifetime = 10 * 365 * 24 * time.Hour

// Ensure makes the Secret with a new CA when it does not exist, and leaves one that does.
func (s CASecret) Ensure(ctx context.Context) error {
	_, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	ca, key, err := pki.NewCA("evalsi-workload-ca", caLifetime)
	if err != nil {
		return err
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		return err
	}
	_, err = s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: map[string]string{evalsi.LabelManagedBy: evalsi.ManagedBy}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: pki.EncodeCert(ca), corev1.TLSPrivateKeyKey: keyPEM},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // another signer made it first
	}
	if err != nil {
		return fmt.Errorf("creating the signer's CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// Read returns the CA the Secret holds now.
func (s CASecret) Read(ctx context.Context) (*Authority, error) {
	secret, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the signer's CA: %w", err)
	}
	a, err := ParseAuthority(secret.Data)
	if err != nil {
		return nil, fmt.Errorf("the signer's CA in Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return a, nil
}

// ParseAuthority reads a CA from a Secret's data: tls.crt and tls.key, and ca.crt when present.
func ParseAuthority(data map[string][]byte) (*Authority, error) {
	pair, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, err
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s cannot sign", corev1.TLSPrivateKeyKey)
	}
	if !pair.Leaf.IsCA {
		return nil, fmt.Errorf("%s is not a CA (basicConstraints CA:FALSE)", corev1.TLSCertKey)
	}
	a := &Authority{Cert: pair.Leaf, Key: signer, Bundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pair.Leaf.Raw})}
	bundle, ok := data["ca.crt"]
	if !ok {
		return a, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, fmt.Errorf("ca.crt: no PEM certificate in it")
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: pair.Leaf.NotBefore, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("ca.crt does not hold the signing CA %s: its certificates would not verify what the signer issues", corev1.TLSCertKey)
	}
	a.Bundle = bundle
	return a, nil
}
