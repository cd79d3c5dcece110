package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"evals.si/operator/cluster"
	"evals.si/operator/evalsi"
)

// RefuseImages installs, until the test ends, a ValidatingAdmissionPolicy that refuses with 422
// Invalid ("images come from an approved registry") Deployments in namespace ns whose first
// container's image starts with prefix: a cluster policy that only the API server knows, as a
// platform's registry allow-list is. It returns once the policy is in force, and removes it when
// the test ends.
func RefuseImages(t testing.TB, ctx context.Context, c *cluster.Cluster, ns, prefix string) {
	t.Helper()
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
			t.Fatalf("creating the image policy: %v", err)
		}
		t.Cleanup(func() { r.Delete(context.Background(), name, metav1.DeleteOptions{}) })
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
	deployments := c.Dynamic().Resource(evalsi.Deployments).Namespace(ns)
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, last = deployments.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(last), nil
	})
	if err != nil {
		t.Fatalf("the image policy is not in force: a dry run gave %v", last)
	}
}
