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
	ns := "references-test"
	activeNamespace(t, ctx, ns, nil)
	grant(t, ctx, ns, "tina", []rbacv1.PolicyRule{
		{APIGroups: []string{"evals.si"}, Resources: []string{"evaluators", "checkpointservers"}, Verbs: []string{"get", "create", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"model-key"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}},
	}, "tina")
	tina := impersonate("tina")
	// cora may write Evaluators and CheckpointServers but not create pods (evalsi-tenant-access).
	grant(t, ctx, ns, "cora", []rbacv1.PolicyRule{
		{APIGroups: []string{"evals.si"}, Resources: []string{"evaluators", "checkpointservers"}, Verbs: []string{"get", "create", "update", "patch"}},
	}, "cora")
	cora := impersonate("cora")

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
		t.Run(name, func(t *testing.T) { checkAdmission(t, try(tc.obj), tc.want) })
	}
	imaged := evaluator("imaged")
	imaged.Object["spec"].(map[string]any)["image"] = "cora/tool:1"
	accounted := evaluator("accounted")
	accounted.Object["spec"].(map[string]any)["serviceAccountName"] = "deployer"
	for name, tc := range map[string]struct {
		obj  *unstructured.Unstructured
		want string // "" admits
	}{
		"cora's CheckpointServer":                {obj: checkpointServer("cora-vllm", map[string]any{}), want: "a CheckpointServer runs an image and arguments of its writer's choosing, which is creating a pod: cora may not create pods in " + ns},
		"cora's Evaluator with an image":         {obj: imaged, want: "spec.image runs an image of its writer's choosing, which is creating a pod: cora may not create pods in " + ns},
		"cora's Evaluator running as an account": {obj: accounted, want: "spec.serviceAccountName runs the pool as a service account of its writer's choosing, which is creating a pod: cora may not create pods in " + ns},
		"cora's Evaluator of the platform image": {obj: evaluator("cora-plain")},
	} {
		t.Run(name, func(t *testing.T) {
			checkAdmission(t, create(ctx, cora, evalsi(strings.ToLower(tc.obj.GetKind())+"s"), ns, tc.obj), tc.want)
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

// TestRunKeysHeldByTheAPIServer installs evalsi-crds with the webhook disabled and has rita, who
// may write EvalRuns but not read Secrets, name keys for a run's target: the workers would send
// a named key to the target, so each keyed target is refused, naming the key, until a project
// binder opens that key to the namespace's runs with its label; a run without a key is admitted,
// and so is a keyed one by sam, who may get the namespace's Secrets.
func TestRunKeysHeldByTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	installCRDsChart(t)
	cs := env.Clientset()
	ns := "run-keys-test"
	activeNamespace(t, ctx, ns, nil)
	runs := rbacv1.PolicyRule{APIGroups: []string{"evals.si"}, Resources: []string{"evalruns"}, Verbs: []string{"get", "create"}}
	grant(t, ctx, ns, "run-writer", []rbacv1.PolicyRule{runs}, "rita")
	grant(t, ctx, ns, "secret-reader", []rbacv1.PolicyRule{runs, {APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}, "sam")
	run := func(target map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
			"metadata": map[string]any{"generateName": "keyed-", "namespace": ns}, "spec": map[string]any{"suite": "smoke", "target": target}}}
	}
	endpoint := func(key string) map[string]any {
		e := map[string]any{"url": "https://collector.example/v1", "model": "m"}
		if key != "" {
			e["apiKeyEnv"] = key
		}
		return map[string]any{"endpoint": e}
	}
	checkpoint := map[string]any{"checkpointServer": "step-4000", "apiKeyEnv": "VLLM_API_KEY"}
	try := func(user string, target map[string]any) error {
		return create(ctx, impersonate(user), evalsi("evalruns"), ns, run(target))
	}
	clustertest.Eventually(t, ctx, "the run keys policy in force", func() error {
		if err := try("rita", endpoint("OPENAI_API_KEY")); err == nil || !strings.Contains(err.Error(), "evalsi-run-keys") {
			return fmt.Errorf("a probe gave %v", err)
		}
		return nil
	})
	// keyedRun is a run rita or sam creates, and the refusal it gets ("" admits).
	type keyedRun struct {
		user   string
		target map[string]any
		want   string
	}
	check := func(cases map[string]keyedRun) {
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) { checkAdmission(t, try(tc.user, tc.target), tc.want) })
		}
	}
	check(map[string]keyedRun{
		"an endpoint without a key":           {user: "rita", target: endpoint("")},
		"a key sent to rita's endpoint":       {user: "rita", target: endpoint("OPENAI_API_KEY"), want: "names the key OPENAI_API_KEY, which the evaluation workers would send to the target; rita may not get the Secrets of " + ns},
		"a key sent to a CheckpointServer":    {user: "rita", target: checkpoint, want: "run-key.evals.si/VLLM_API_KEY=allowed"},
		"a key named by who may read Secrets": {user: "sam", target: endpoint("OPENAI_API_KEY")},
		"a CheckpointServer key named by sam": {user: "sam", target: checkpoint},
		// A malformed target names no key: the policy leaves it to validation (the webhook's
		// schema, the operator's InvalidSpec) rather than failing on it.
		"an endpoint that is not an object": {user: "rita", target: map[string]any{"endpoint": "https://collector.example/v1"}},
	})

	// A project binder (the cluster administrator here) opens one key to the namespace's runs.
	open := []byte(`{"metadata":{"labels":{"run-key.evals.si/OPENAI_API_KEY":"allowed"}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, ns, "application/merge-patch+json", open, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the opened key admitted", func() error { return try("rita", endpoint("OPENAI_API_KEY")) })
	check(map[string]keyedRun{
		"the opened key":            {user: "rita", target: endpoint("OPENAI_API_KEY")},
		"a key that was not opened": {user: "rita", target: endpoint("ANTHROPIC_API_KEY"), want: "ANTHROPIC_API_KEY"},
		"the CheckpointServer's":    {user: "rita", target: checkpoint, want: "VLLM_API_KEY"},
	})
}

// checkAdmission fails t unless err is what a create should get: none when want is "", else a
// refusal containing want.
func checkAdmission(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("refused: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%v, want a refusal containing %q", err, want)
	}
}
