package cluster

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// RefuseImages installs, until the test ends, a ValidatingAdmissionPolicy that refuses with 422
// Invalid ("images come from an approved registry") Deployments in namespace ns whose first
// container's image starts with prefix: a cluster policy that only the API server knows, as a
// platform's registry allow-list is. cleanup registers the policy's removal (a test's t.Cleanup).
// It returns once the policy is in force.
func (c *Cluster) RefuseImages(ctx context.Context, ns, prefix string, cleanup func(func())) error {
	name := "approved-images-" + ns
	policy := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"failurePolicy": "Fail",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{"apps"}, "apiVersions": []any{"v1"}, "resources": []any{"deployments"}, "operations": []any{"CREATE", "UPDATE"},
			}}},
			"validations": []any{map[string]any{
				"expression": fmt.Sprintf("!object.spec.template.spec.containers[0].image.startsWith(%q)", prefix),
				"message":    "images come from an approved registry",
				"reason":     "Invalid",
			}},
		},
	}
	binding := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"policyName":        name,
			"validationActions": []any{"Deny"},
			"matchResources": map[string]any{"namespaceSelector": map[string]any{
				"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns},
			}},
		},
	}
	for _, o := range []struct {
		resource string
		obj      map[string]any
	}{{"validatingadmissionpolicies", policy}, {"validatingadmissionpolicybindings", binding}} {
		r := c.Dynamic().Resource(schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: o.resource})
		if _, err := r.Create(ctx, &unstructured.Unstructured{Object: o.obj}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating the image policy: %w", err)
		}
		cleanup(func() { r.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "probe"},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "probe"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "probe"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": prefix + "probe"}}},
			},
		},
	}}
	deployments := c.Dynamic().Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns)
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, last = deployments.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(last), nil
	})
	if err != nil {
		return fmt.Errorf("the image policy is not in force: a dry run gave %v", last)
	}
	return nil
}
