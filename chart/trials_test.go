package chart_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/cluster/clustertest"
	evalsiv "evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
)

// TestTrialPodsHeldToTheirShape renders a pod rung SandboxClass as the operator would and applies
// its launcher's account, Role and trial shape to the real API server, then creates trial pods as
// the launcher: one that is its shape with another of the class's images and a plain environment
// value is admitted; one that adds a volume, drops or changes the guest, mounts a token, runs
// another image, reads a Secret, adds a capability or claims another class is refused.
func TestTrialPodsHeldToTheirShape(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A control plane of its own: the package's shared one has seen evalsi-crds installed,
	// upgraded and uninstalled by the other tests, and the API server keeps reading a re-made
	// binding's parameters as the first one named them.
	const sandbox = "evalsi-sandbox"
	c := ownControlPlane(t, ctx)
	helm(t, "install", "evalsi-crds", "evalsi-crds", "-n", "evalsi-system", "--create-namespace",
		"--kubeconfig="+c.Kubeconfig, "--set", "webhook.enabled=false")
	activeNamespace(t, ctx, sandbox, nil)
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass",
		"metadata": map[string]any{"name": "trials", "uid": "00000000-0000-4000-8000-000000000001"},
		"spec":     map[string]any{"rung": "pod", "trialImages": []any{"python:3.13-slim", "node:22-slim"}},
	}}
	res, err := render.Object(class, render.Options{DefaultImage: "evalsi/platform:1.4.0", SandboxNamespace: sandbox,
		APIURL: "https://evalsid.evalsi-platform.svc:8443"})
	if err != nil {
		t.Fatal(err)
	}
	admin := env.Dynamic()
	for _, o := range res.Objects {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "PodTemplate":
			if err := engine.StampChild(class, o); err != nil {
				t.Fatal(err)
			}
			o.SetOwnerReferences(nil) // the class is not on this API server
			gvr := evalsiv.ChildResources[o.GetKind()]
			if _, err := admin.Resource(gvr).Namespace(sandbox).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	shape, err := admin.Resource(evalsiv.PodTemplates).Namespace(sandbox).Get(ctx, "sandbox-trials-trial", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// trial is a pod of the shape, as the launcher makes one, changed by change.
	trial := func(change func(meta, spec, container map[string]any)) *unstructured.Unstructured {
		tmpl := shape.DeepCopy().Object["template"].(map[string]any)
		meta, spec := tmpl["metadata"].(map[string]any), tmpl["spec"].(map[string]any)
		meta["generateName"] = "trial-"
		container := spec["containers"].([]any)[0].(map[string]any)
		container["image"] = "node:22-slim"
		container["env"] = []any{map[string]any{"name": "EVALSI_TRIAL", "value": "run-1/case-7"}}
		if change != nil {
			change(meta, spec, container)
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}}
	}
	launcher := impersonate("system:serviceaccount:"+sandbox+":sandbox-trials", "system:serviceaccounts", "system:serviceaccounts:"+sandbox)
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	create := func(pod *unstructured.Unstructured) error {
		_, err := launcher.Resource(pods).Namespace(sandbox).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// In force once the policy, with the trial shape among its parameters (the API server learns
	// of both a moment after they are made), refuses a probe for what it is.
	clustertest.Eventually(t, ctx, "evalsi-trial-pods in force", func() error {
		err := create(trial(func(_, _, c map[string]any) { c["image"] = "evil/probe:1" }))
		if err == nil || !strings.Contains(err.Error(), "trialImages") {
			return fmt.Errorf("a probe of another image: %v", err)
		}
		return nil
	})
	if err := create(trial(nil)); err != nil {
		t.Fatalf("the launcher creating a trial of its shape: %v", err)
	}

	for name, tc := range map[string]struct {
		change func(meta, spec, container map[string]any)
		want   string
	}{
		"a Secret volume added": {func(_, spec, _ map[string]any) {
			spec["volumes"] = append(spec["volumes"].([]any), map[string]any{"name": "db", "secret": map[string]any{"secretName": "db"}})
		}, "no field added or changed"},
		"the guest dropped": {func(_, spec, _ map[string]any) { delete(spec, "initContainers") }, "keeps the evalsi-guest init container|keeps every field"},
		"the guest from another image": {func(_, spec, _ map[string]any) {
			spec["initContainers"].([]any)[0].(map[string]any)["image"] = "evil/guest:1"
		}, "keeps the evalsi-guest init container"},
		"a token mounted": {func(_, spec, _ map[string]any) { spec["automountServiceAccountToken"] = true }, "no field added or changed"},
		"another account": {func(_, spec, _ map[string]any) { spec["serviceAccountName"] = "sandbox-trials" }, "no field added or changed"},
		"another image":   {func(_, _, c map[string]any) { c["image"] = "evil/miner:1" }, "runs one of its class's trialImages"},
		"a Secret in the environment": {func(_, _, c map[string]any) {
			c["env"] = []any{map[string]any{"name": "K", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "db", "key": "k"}}}}
		}, "plain values"},
		"another command": {func(_, _, c map[string]any) { c["command"] = []any{"/bin/sh"} }, "only its image and environment values may differ"},
		"a capability added": {func(_, _, c map[string]any) {
			c["securityContext"].(map[string]any)["capabilities"] = map[string]any{"drop": []any{"ALL"}, "add": []any{"NET_RAW"}}
		}, "only its image and environment values may differ"},
		"the host network": {func(_, spec, _ map[string]any) { spec["hostNetwork"] = true }, "no field added or changed"},
		"another class's label": {func(meta, _, _ map[string]any) {
			meta["labels"].(map[string]any)["evals.si/sandboxclass"] = "other"
		}, "its class's trial labels|of its own class alone"},
		"the class's labels removed": {func(meta, _, _ map[string]any) { delete(meta, "labels") }, "its class's trial labels|of its own class alone"},
		"a label added": {func(meta, _, _ map[string]any) {
			meta["labels"].(map[string]any)["app"] = "db-client" // another NetworkPolicy's selector
		}, "its class's trial labels and no other"},
		"an annotation added": {func(meta, _, _ map[string]any) {
			meta["annotations"] = map[string]any{"container.apparmor.security.beta.kubernetes.io/trial": "unconfined"}
		}, "its shape's annotations and no other"},
		"the token's refusal dropped": {func(_, spec, _ map[string]any) { delete(spec, "automountServiceAccountToken") }, "keeps every field of its class's trial shape"},
	} {
		t.Run(name, func(t *testing.T) {
			// Two policies hold a trial's labels; either may answer first. want lists the
			// answers, separated by |.
			err := create(trial(tc.change))
			if err == nil || !slices.ContainsFunc(strings.Split(tc.want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) }) {
				t.Errorf("%v, want a refusal saying %q", err, tc.want)
			}
		})
	}
	if err := create(trial(func(_, _, c map[string]any) { c["image"] = "python:3.13-slim" })); err != nil {
		t.Errorf("a trial of the class's first image: %v", err)
	}

	// A pod of another rung's pool, made by its ReplicaSet as any pod is, is none of this.
	plain := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"generateName": "pool-", "labels": map[string]any{"app.kubernetes.io/component": "pool"}},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "pool", "image": "evalsi/platform:1.4.0"}}}}}
	plainCreate := func() error {
		_, err := admin.Resource(pods).Namespace(sandbox).Create(ctx, plain, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := plainCreate(); err != nil {
		t.Errorf("another rung's pool pod: %v", err)
	}

	// Another class's launcher (one whose shape this test did not make) may make no trial of
	// this class's, whatever RBAC lets it.
	ghost := "system:serviceaccount:" + sandbox + ":sandbox-ghost"
	grant(t, ctx, sandbox, "ghost-launcher", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}}, ghost)
	other := impersonate(ghost, "system:serviceaccounts", "system:serviceaccounts:"+sandbox)
	clustertest.Eventually(t, ctx, "another launcher refused a trial labelled with this class", func() error {
		_, err := other.Resource(pods).Namespace(sandbox).Create(ctx, trial(nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), "of its own class alone") {
			return fmt.Errorf("%v", err)
		}
		return nil
	})

	// Fail closed: with no trial shape (a class deleted or changing rung, its children deleted
	// in no set order), the launcher makes no pod at all, and the other pools' pods still run.
	if err := admin.Resource(evalsiv.PodTemplates).Namespace(sandbox).Delete(ctx, "sandbox-trials-trial", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the launcher refused a trial once no shape holds it", func() error {
		if err := create(trial(nil)); err == nil {
			return errors.New("a trial of the deleted shape was admitted")
		}
		return nil
	})
	if err := plainCreate(); err != nil {
		t.Errorf("another rung's pool pod with no trial shape: %v", err)
	}
}

// TestPodRungClassDeletedInTheBackgroundOnly installs evalsi-crds and deletes SandboxClasses
// (dryRun=All) as an administrator would: a pod rung class is refused a foreground deletion,
// which would delete its trial shape before its launcher's RoleBinding (the garbage collector
// deletes dependents first, down the chain the operator makes with evals.si/outlives), and is
// deleted in the background as kubectl does by default; a class of another rung is deleted
// either way.
func TestPodRungClassDeletedInTheBackgroundOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	installCRDsChart(t)
	classes := env.Dynamic().Resource(evalsiv.SandboxClasses)
	for name, rung := range map[string]string{"deleted-pod-rung": "pod", "deleted-landlock": "landlock"} {
		class := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"rung": rung}}}
		if _, err := classes.Create(ctx, class, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { classes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	deleteAs := func(name string, propagation metav1.DeletionPropagation) error {
		return classes.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &propagation, DryRun: []string{metav1.DryRunAll}})
	}
	clustertest.Eventually(t, ctx, "the deletion policy in force", func() error {
		err := deleteAs("deleted-pod-rung", metav1.DeletePropagationForeground)
		if err == nil || !strings.Contains(err.Error(), "is deleted in the background") {
			return fmt.Errorf("a foreground deletion of a pod rung class: %v", err)
		}
		return nil
	})
	for _, tc := range []struct {
		name        string
		propagation metav1.DeletionPropagation
	}{
		{"deleted-pod-rung", metav1.DeletePropagationBackground},
		{"deleted-landlock", metav1.DeletePropagationForeground},
		{"deleted-landlock", metav1.DeletePropagationBackground},
	} {
		if err := deleteAs(tc.name, tc.propagation); err != nil {
			t.Errorf("%s deleted in the %s: %v", tc.name, tc.propagation, err)
		}
	}
}
