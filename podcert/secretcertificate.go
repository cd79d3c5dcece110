package podcert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/pki"
)

// SecretCertificate is a certificate the signer keeps in a Secret, for a service account whose
// client cannot read a podCertificate volume: KEDA, whose trigger takes its client certificate
// from a Secret of its own namespace (a ClusterTriggerAuthentication's). The Secret holds the
// certificate naming Namespace's ServiceAccount (tls.crt) and its key (tls.key), renewed at two
// thirds of its lifetime and when the CA changes.
type SecretCertificate struct {
	Namespace, Secret, ServiceAccount string
}

// ParseSecretCertificate reads NAMESPACE/SECRET=SERVICEACCOUNT.
func ParseSecretCertificate(s string) (SecretCertificate, error) {
	ref, sa, ok := strings.Cut(s, "=")
	ns, name, ok2 := strings.Cut(ref, "/")
	if !ok || !ok2 {
		return SecretCertificate{}, fmt.Errorf("%q: want NAMESPACE/SECRET=SERVICEACCOUNT", s)
	}
	for _, v := range []string{ns, name, sa} {
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			return SecretCertificate{}, fmt.Errorf("%q: %q: %s", s, v, strings.Join(errs, "; "))
		}
	}
	return SecretCertificate{Namespace: ns, Secret: name, ServiceAccount: sa}, nil
}

// keep issues sc's certificate again when its Secret lacks one, holds one of another CA or of
// another account, or one past two thirds of its lifetime.
func (sc SecretCertificate) keep(ctx context.Context, client kubernetes.Interface, ca *Authority, policy Policy, now time.Time) error {
	secrets := client.CoreV1().Secrets(sc.Namespace)
	current, err := secrets.Get(ctx, sc.Secret, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Secret %s/%s: %w", sc.Namespace, sc.Secret, err)
	}
	exists := err == nil
	if exists && sc.current(current, ca, now) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	issued, err := issue(&key.PublicKey, sc.Namespace, sc.ServiceAccount, policy.Lifetime, ca, policy, now)
	if err != nil {
		return err
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		return err
	}
	data := map[string][]byte{corev1.TLSCertKey: []byte(issued.Chain), corev1.TLSPrivateKeyKey: keyPEM}
	if !exists {
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: sc.Secret, Labels: map[string]string{evalsi.LabelManagedBy: evalsi.ManagedBy}},
			Type:       corev1.SecretTypeTLS, Data: data,
		}, metav1.CreateOptions{})
	} else {
		current.Data = data
		_, err = secrets.Update(ctx, current, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing the certificate of %s into Secret %s/%s: %w", sc.ServiceAccount, sc.Namespace, sc.Secret, err)
	}
	return nil
}

// current reports whether secret holds a certificate of sc's account signed by ca's certificate,
// with more than a third of its lifetime left at now.
func (sc SecretCertificate) current(secret *corev1.Secret, ca *Authority, now time.Time) bool {
	pair, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return false
	}
	leaf := pair.Leaf
	renewAt := leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3)
	return leaf.Subject.CommonName == evalsi.ServiceAccountIdentity(sc.Namespace, sc.ServiceAccount) &&
		leaf.CheckSignatureFrom(ca.Cert) == nil && now.Before(renewAt)
}
