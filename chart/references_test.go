package chart_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
)

// TestReferencesHeldWithoutTheWebhook installs evalsi-crds with the webhook disabled, so that only
// the API server's own admission policies stand, and has tina, who may write Evaluators and
// CheckpointServers and get one Secret, reference what she may not get: each Secret, ConfigMap
// and claim she may not get is refused, naming it; what she may get is admitted; a change of an
// existing object's spec is checked as its writer, and an update of its metadata alone is not.
func TestReferencesHeldWithoutTheWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	installCRDsChart(t)
	cs := env.Clientset()
	ns := "references-test"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, namespace(ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	grant(t, ctx, ns, "tina", []rbacv1.PolicyRule{
		{APIGroups: []string{"evals.si"}, Resources: []string{"evaluators", "checkpointservers"}, Verbs: []string{"get", "create", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"model-key"}, Verbs: []string{"get"}},
	}, "tina")
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tina", Groups: []string{"system:authenticated"}}
	tina := dynamic.NewForConfigOrDie(cfg)

	secretEnv := func(secret string) map[string]any {
		return map[string]any{"name": "KEY", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": secret, "key": "api-key"}}}
	}
	evaluator := func(name string, env ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{"env": env}}}
	}
	checkpointServer := func(name string, spec map[string]any) *unstructured.Unstructured {
		spec["model"] = "/checkpoints/step-1"
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "CheckpointServer",
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}}
	}
	try := func(obj *unstructured.Unstructured) error {
		return create(ctx, tina, evalsi(strings.ToLower(obj.GetKind())+"s"), ns, obj)
	}
	// In force once the policy refuses a probe (it is loaded a moment after it is made).
	clustertest.Eventually(t, ctx, "the references policy in force", func() error {
		if err := try(evaluator("probe", secretEnv("db-password"))); err == nil || !strings.Contains(err.Error(), "evalsi-workload-references") {
			return fmt.Errorf("a probe gave %v", err)
		}
		return nil
	})

	for name, tc := range map[string]struct {
		obj  *unstructured.Unstructured
		want string // "" admits
	}{
		"a Secret she may get":                 {obj: evaluator("readable", secretEnv("model-key"))},
		"no reference":                         {obj: evaluator("plain", map[string]any{"name": "LEVEL", "value": "debug"})},
		"a Secret she may not get":             {obj: evaluator("secret", secretEnv("model-key"), secretEnv("db-password")), want: "a Secret that tina may not get (it names model-key, db-password)"},
		"a ConfigMap she may not get":          {obj: evaluator("config", map[string]any{"name": "C", "valueFrom": map[string]any{"configMapKeyRef": map[string]any{"name": "team-config", "key": "k"}}}), want: "a ConfigMap that tina may not get (it names team-config)"},
		"an API key Secret":                    {obj: checkpointServer("keyed", map[string]any{"apiKeySecret": map[string]any{"name": "vllm-key"}}), want: "a Secret that tina may not get (it names vllm-key)"},
		"a checkpoint claim":                   {obj: checkpointServer("claimed", map[string]any{"checkpointClaim": "training-checkpoints"}), want: "a PersistentVolumeClaim that tina may not get (training-checkpoints)"},
		"an API key Secret she may get":        {obj: checkpointServer("keyed-ok", map[string]any{"apiKeySecret": map[string]any{"name": "model-key"}})},
		"a Secret in a CheckpointServer's env": {obj: checkpointServer("env", map[string]any{"env": []any{secretEnv("db-password")}}), want: "db-password"},
	} {
		t.Run(name, func(t *testing.T) {
			err := try(tc.obj)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%v, want a refusal containing %q", err, tc.want)
			}
		})
	}

	// An Evaluator an administrator made with db-password: tina may label it, not change its spec.
	evaluators := env.Dynamic().Resource(evalsi("evaluators")).Namespace(ns)
	if _, err := evaluators.Create(ctx, evaluator("admins", secretEnv("db-password")), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	patch := func(body string) error {
		_, err := tina.Resource(evalsi("evaluators")).Namespace(ns).Patch(ctx, "admins", "application/merge-patch+json", []byte(body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := patch(`{"metadata":{"labels":{"team":"eval"}}}`); err != nil {
		t.Errorf("tina labelling the administrator's Evaluator: %v", err)
	}
	if err := patch(`{"spec":{"image":"tina/exfiltrate:1"}}`); err == nil || !strings.Contains(err.Error(), "db-password") {
		t.Errorf("tina changing the image of an Evaluator that reads db-password: %v, want a refusal naming it", err)
	}
}
