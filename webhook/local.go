package webhook

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/evalsi"
)

// Configurations returns the validating and mutating webhook configurations, named name+"-validation"
// and name+"-creator", of a webhook served at url (a local process registered by URL, as `dev` and
// the tests run it; the evalsi-crds chart declares the same rules for the in-cluster Service). The
// self-signed mode fills in their caBundle.
func Configurations(name, url string) (*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(5)
	rules := func(ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{evalsi.Group}, APIVersions: []string{evalsi.Version},
			Resources: evalsi.Resources(evalsi.Kinds),
		}}}
	}
	validateURL, mutateURL := url+ValidatePath, url+MutatePath
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-validation"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate.evals.si",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &validateURL},
			Rules:                   rules(admissionregistrationv1.Create, admissionregistrationv1.Update),
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "not-being-deleted",
				Expression: "request.operation != 'UPDATE' || !has(object.metadata.deletionTimestamp)",
			}},
		}},
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-creator"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "creator.evals.si",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &mutateURL},
			Rules:                   rules(admissionregistrationv1.Create),
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	return vwc, mwc
}

// Register creates (or replaces) the configurations of a webhook served at url and returns a
// function that deletes them.
func Register(ctx context.Context, kube kubernetes.Interface, name, url string) (remove func(), err error) {
	vwc, mwc := Configurations(name, url)
	ar := kube.AdmissionregistrationV1()
	for _, del := range []func() error{
		func() error {
			return ar.ValidatingWebhookConfigurations().Delete(ctx, vwc.Name, metav1.DeleteOptions{})
		},
		func() error { return ar.MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("replacing the webhook configurations: %w", err)
		}
	}
	if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{FieldManager: evalsi.FieldManager}); err != nil {
		return nil, fmt.Errorf("registering the validating webhook: %w", err)
	}
	if _, err := ar.MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{FieldManager: evalsi.FieldManager}); err != nil {
		return nil, fmt.Errorf("registering the mutating webhook: %w", err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ar.ValidatingWebhookConfigurations().Delete(ctx, vwc.Name, metav1.DeleteOptions{})
		ar.MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{})
	}, nil
}
