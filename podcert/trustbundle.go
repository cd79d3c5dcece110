package podcert

import (
	"context"
	"fmt"
	"strings"

	certv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/evalsi"
)

// TrustBundleName is the name of the ClusterTrustBundle that publishes signer's CA bundle: the
// API server requires a signer's bundles to be named after it.
func TrustBundleName(signer string) string {
	return strings.ReplaceAll(signer, "/", ":") + ":ca"
}

// PublishTrustBundle creates or updates signer's ClusterTrustBundle to the CA bundle of secret,
// which pods project (a clusterTrustBundle source of that signer) to verify its certificates.
func PublishTrustBundle(ctx context.Context, client kubernetes.Interface, signer string, secret CASecret) error {
	ca, err := secret.Read(ctx)
	if err != nil {
		return err
	}
	bundles := client.CertificatesV1().ClusterTrustBundles()
	name := TrustBundleName(signer)
	current, err := bundles.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = bundles.Create(ctx, &certv1.ClusterTrustBundle{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{evalsi.LabelManagedBy: evalsi.ManagedBy}},
			Spec:       certv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: string(ca.Bundle)},
		}, metav1.CreateOptions{})
	case err == nil && current.Spec.TrustBundle != string(ca.Bundle):
		current.Spec.TrustBundle = string(ca.Bundle)
		_, err = bundles.Update(ctx, current, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("publishing ClusterTrustBundle %s: %w", name, err)
	}
	return nil
}
