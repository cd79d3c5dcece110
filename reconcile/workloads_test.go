package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
)

func TestEvaluatorConvergesAndSteadyStateWritesNothing(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	e := startEngine(t, Config{Namespace: ns, Resync: 500 * time.Millisecond})
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "judge", map[string]any{
		"replicas":  int64(2),
		"resources": map[string]any{"requests": map[string]any{"cpu": "0.5", "memory": "256Mi"}},
		"tolerations": []any{map[string]any{
			"key": "dedicated", "operator": "Equal", "value": "evals", "effect": "NoExecute", "tolerationSeconds": int64(30),
		}},
	})
	got := waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "True", "Available")
	if r, _, _ := unstructured.NestedInt64(got.Object, "status", "readyReplicas"); r != 2 {
		t.Errorf("status.readyReplicas = %d, want 2", r)
	}
	if a, _, _ := unstructured.NestedString(got.Object, "status", "autoscaling"); a != "Fixed" {
		t.Errorf("status.autoscaling = %q, want Fixed", a)
	}
	deploy := getObj(t, ctx, evalsi.Deployments, ns, "judge-evaluator")
	if ref := metav1.GetControllerOf(deploy); ref == nil || ref.Kind != "Evaluator" || ref.UID != got.GetUID() {
		t.Errorf("Deployment controller owner = %v, want the Evaluator", ref)
	}

	// Steady state: many resyncs, not one write.
	settled(t, ctx, e.Engine)
	before := writes(e.Engine)
	resyncs := e.reconcilesAfter(t, ctx, 6, "evaluator")
	deployRV, evalRV := deploy.GetResourceVersion(), got.GetResourceVersion()
	resyncs()
	if w := writes(e.Engine) - before; w != 0 {
		t.Errorf("%v writes at steady state over 6 resyncs, want 0", w)
	}
	if rv := getObj(t, ctx, evalsi.Deployments, ns, "judge-evaluator").GetResourceVersion(); rv != deployRV {
		t.Errorf("Deployment resourceVersion changed at steady state: %s -> %s", deployRV, rv)
	}
	if rv := getObj(t, ctx, evalsi.Evaluators, ns, "judge").GetResourceVersion(); rv != evalRV {
		t.Errorf("Evaluator resourceVersion changed at steady state: %s -> %s", evalRV, rv)
	}
}

func TestDriftIsRepaired(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	startEngine(t, Config{Namespace: ns})
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "judge", map[string]any{"image": "evalsi/judge:1"})
	waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "True", "Available")

	// Someone edits a field the operator sets.
	mergePatch(t, ctx, evalsi.Deployments, ns, "judge-evaluator",
		`{"spec":{"template":{"spec":{"containers":[{"name":"evaluator","image":"evil/image:1"}]}}}}`)
	clustertest.Eventually(t, ctx, "image restored", func() error {
		d := getObj(t, ctx, evalsi.Deployments, ns, "judge-evaluator")
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		if img := cs[0].(map[string]any)["image"]; img != "evalsi/judge:1" {
			return fmt.Errorf("image is %v", img)
		}
		return nil
	})

	// Someone deletes the Deployment.
	if err := client(evalsi.Deployments, ns).Delete(ctx, "judge-evaluator", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "Deployment recreated", func() error {
		d, err := client(evalsi.Deployments, ns).Get(ctx, "judge-evaluator", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.GetDeletionTimestamp() != nil {
			return fmt.Errorf("still the deleted one")
		}
		return nil
	})
}

// TestChildNamesOfOthersAreNotTakenOver creates an Evaluator whose children's name a team's own
// Deployment and NetworkPolicy already have: the operator must not force its apply over objects
// it did not make (that would replace the team's pod template and policy, and deleting the
// Evaluator would delete them). The Evaluator says Conflict, and takes the names once they are
// free. What the operator made for an earlier Evaluator of that name, orphaned at its deletion,
// is adopted.
func TestChildNamesOfOthersAreNotTakenOver(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	startEngine(t, Config{Namespace: ns})
	web := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "judge-evaluator", "labels": map[string]any{"app": "web"}},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": "team/web:1"}}},
			},
		},
	}}
	web, err := client(evalsi.Deployments, ns).Create(ctx, web, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// And a NetworkPolicy of that name, for its database: a policy the API server would let the
	// operator rewrite, where the Deployment's immutable selector stops it.
	db := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": "judge-evaluator"},
		"spec":     map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "db"}}, "policyTypes": []any{"Ingress"}},
	}}
	db, err = client(evalsi.NetworkPolicies, ns).Create(ctx, db, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "judge", map[string]any{"replicas": int64(1)})
	got := waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "False", evalsi.ReasonConflict)
	if _, _, msg := conditionOf(got, evalsi.ConditionReady); !strings.Contains(msg, "Deployment judge-evaluator already exists") || !strings.Contains(msg, "no controller") {
		t.Errorf("Ready message %q, want the Deployment named and its lack of a controller", msg)
	}
	d := getObj(t, ctx, evalsi.Deployments, ns, "judge-evaluator")
	if d.GetGeneration() != web.GetGeneration() || len(d.GetOwnerReferences()) != 0 || d.GetLabels()[evalsi.LabelManagedBy] != "" {
		t.Errorf("the team's Deployment was written: generation %d -> %d, owners %v, labels %v",
			web.GetGeneration(), d.GetGeneration(), d.GetOwnerReferences(), d.GetLabels())
	}

	if p := getObj(t, ctx, evalsi.NetworkPolicies, ns, "judge-evaluator"); p.GetResourceVersion() != db.GetResourceVersion() {
		t.Errorf("the team's NetworkPolicy was written: %v", p.Object)
	}

	// The names freed, the Evaluator takes them at its next look (nameRecheck), with no event.
	for _, gvr := range []schema.GroupVersionResource{evalsi.Deployments, evalsi.NetworkPolicies} {
		if err := client(gvr, ns).Delete(ctx, "judge-evaluator", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "True", "Available")

	// Deleted with its children orphaned, then made again: the operator adopts what it made.
	orphan := metav1.DeletePropagationOrphan
	if err := client(evalsi.Evaluators, ns).Delete(ctx, "judge", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, evalsi.Evaluators, ns, "judge")
	clustertest.Eventually(t, ctx, "Deployment orphaned", func() error {
		if refs := getObj(t, ctx, evalsi.Deployments, ns, "judge-evaluator").GetOwnerReferences(); len(refs) != 0 {
			return fmt.Errorf("owners %v", refs)
		}
		return nil
	})
	again := create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "judge", map[string]any{"replicas": int64(1)})
	waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "True", "Available")
	if ref := metav1.GetControllerOf(getObj(t, ctx, evalsi.Deployments, ns, "judge-evaluator")); ref == nil || ref.UID != again.GetUID() {
		t.Errorf("Deployment controller owner = %v, want the new Evaluator", ref)
	}
}

func TestInvalidSpecIsTerminal(t *testing.T) {
	for name, tc := range map[string]struct {
		spec    map[string]any
		message string
	}{
		"unknown field": {map[string]any{"replicaz": int64(2)}, `/spec/replicaz: is not a known field`},
		"a rule of the API server": {
			map[string]any{"tolerations": []any{map[string]any{"key": "k", "effect": "NoSchedule", "tolerationSeconds": int64(5)}}},
			"/spec/tolerations/0/effect: must be NoExecute when tolerationSeconds is set",
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			ns := newNamespace(t, ctx, "")
			e := startEngine(t, Config{Namespace: ns})
			create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "bad", tc.spec)
			got := waitReady(t, ctx, evalsi.Evaluators, ns, "bad", "False", "InvalidSpec")
			if _, _, msg := readyCondition(got); !strings.Contains(msg, tc.message) {
				t.Errorf("message %q does not name the field (%s)", msg, tc.message)
			}
			time.Sleep(time.Second)
			if n := e.Metrics().ReconcileCount("evaluator", "error"); n != 0 {
				t.Errorf("%v retried reconciles of an invalid spec, want 0", n)
			}
		})
	}
}

// TestRefusedRenderingIsNotAppliedAgain has the API server refuse an Evaluator's Deployment
// with 422 (a cluster policy that validation cannot know, such as an image registry allow-list):
// the Evaluator is Stalled for its generation and nothing is sent again over three resyncs. A new
// spec renders something else, which is applied.
func TestRefusedRenderingIsNotAppliedAgain(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	clustertest.RefuseImages(t, ctx, env, ns, "registry.example/unapproved/")
	e := startEngine(t, Config{Namespace: ns, Resync: time.Second})
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "judge", map[string]any{"replicas": int64(1), "image": "registry.example/unapproved/judge:1"})
	got := waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "False", "InvalidSpec")
	if s, _, msg := conditionOf(got, "Stalled"); s != "True" || !strings.Contains(msg, "was refused by the API server") || !strings.Contains(msg, "approved registry") {
		t.Errorf("Stalled=%s %q, want True and the API server's refusal", s, msg)
	}
	settled(t, ctx, e.Engine)
	before, applies := writes(e.Engine), e.Metrics().KubeRequests("PATCH", "deployments")
	time.Sleep(3500 * time.Millisecond)
	if w := writes(e.Engine) - before; w != 0 {
		t.Errorf("%v writes over three resyncs of a refused rendering, want 0", w)
	}
	if a := e.Metrics().KubeRequests("PATCH", "deployments") - applies; a != 0 {
		t.Errorf("%v applies of the refused Deployment over three resyncs, want 0", a)
	}
	mergePatch(t, ctx, evalsi.Evaluators, ns, "judge", `{"spec":{"image":"registry.example/approved/judge:1"}}`)
	waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "True", "Available")
}

func TestAutoscalingFollowsKEDAAvailability(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	if err := env.UninstallCRDs(ctx, "scaledobjects.keda.sh"); err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, Config{Namespace: ns})
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "pool", map[string]any{
		"autoscaling": map[string]any{"minReplicas": int64(3), "maxReplicas": int64(10)},
	})
	got := waitReady(t, ctx, evalsi.Evaluators, ns, "pool", "True", "AutoscalingUnavailable")
	if _, _, msg := readyCondition(got); !strings.Contains(msg, "3 fixed replicas") {
		t.Errorf("Ready message %q does not say the pool runs fixed replicas", msg)
	}

	// KEDA appears: the operator applies a ScaledObject without a restart, and the Deployment
	// keeps its replicas (not reset to 1) once the operator stops applying them.
	if err := env.InstallKedaCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx, evalsi.Evaluators, ns, "pool", "True", "Available")
	so := getObj(t, ctx, evalsi.ScaledObjects, ns, "pool-evaluator")
	if max, _, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount"); max != 10 {
		t.Errorf("ScaledObject maxReplicaCount = %d, want 10", max)
	}
	d := getObj(t, ctx, evalsi.Deployments, ns, "pool-evaluator")
	if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 3 {
		t.Errorf("Deployment replicas = %d after handing scaling to KEDA, want 3", r)
	}
	for _, m := range d.GetManagedFields() {
		if m.Manager == engine.FieldManager && strings.Contains(string(m.FieldsV1.Raw), `"f:replicas"`) {
			t.Errorf("the operator still owns spec.replicas: %s", m.FieldsV1.Raw)
		}
	}

	// The HPA scales the Deployment; the operator does not fight it.
	mergePatch(t, ctx, evalsi.Deployments, ns, "pool-evaluator", `{"spec":{"replicas":7}}`)
	clustertest.Eventually(t, ctx, "status follows the HPA", func() error {
		d := getObj(t, ctx, evalsi.Deployments, ns, "pool-evaluator")
		for _, f := range []string{"replicas", "updatedReplicas", "readyReplicas", "availableReplicas"} {
			if n, _, _ := unstructured.NestedInt64(d.Object, "status", f); n != 7 {
				return fmt.Errorf("Deployment status.%s = %d", f, n)
			}
		}
		got := waitReady(t, ctx, evalsi.Evaluators, ns, "pool", "True", "Available")
		for _, f := range []string{"replicas", "readyReplicas"} {
			if n, _, _ := unstructured.NestedInt64(got.Object, "status", f); n != 7 {
				return fmt.Errorf("Evaluator status.%s = %d", f, n)
			}
		}
		return nil
	})
	settled(t, ctx, e.Engine)
	before := writes(e.Engine)
	time.Sleep(2 * time.Second)
	if r, _, _ := unstructured.NestedInt64(getObj(t, ctx, evalsi.Deployments, ns, "pool-evaluator").Object, "spec", "replicas"); r != 7 {
		t.Errorf("Deployment replicas = %d, want the HPA's 7", r)
	}
	if w := writes(e.Engine) - before; w != 0 {
		t.Errorf("%v writes after the HPA scaled, want 0", w)
	}

	// Autoscaling removed: the ScaledObject goes, fixed replicas come back.
	mergePatch(t, ctx, evalsi.Evaluators, ns, "pool", `{"spec":{"autoscaling":null,"replicas":2}}`)
	waitReady(t, ctx, evalsi.Evaluators, ns, "pool", "True", "Available")
	clustertest.Eventually(t, ctx, "ScaledObject deleted", func() error {
		_, err := client(evalsi.ScaledObjects, ns).Get(ctx, "pool-evaluator", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("ScaledObject still there (%v)", err)
	})
	if r, _, _ := unstructured.NestedInt64(getObj(t, ctx, evalsi.Deployments, ns, "pool-evaluator").Object, "spec", "replicas"); r != 2 {
		t.Errorf("Deployment replicas = %d, want 2", r)
	}
}

func TestCheckpointServer(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	startEngine(t, Config{Namespace: ns})
	create(t, ctx, evalsi.CheckpointServers, ns, "CheckpointServer", "step-900", map[string]any{
		"model":        "adapter-step-900",
		"lora":         map[string]any{"baseModel": "meta-llama/Llama-3.1-8B-Instruct"},
		"apiKeySecret": map[string]any{"name": "vllm-key"},
		"gpus":         int64(1),
	})
	got := waitReady(t, ctx, evalsi.CheckpointServers, ns, "step-900", "True", "Serving")
	if ep, _, _ := unstructured.NestedString(got.Object, "status", "endpoint"); ep != "http://step-900-vllm."+ns+".svc:8000/v1" {
		t.Errorf("status.endpoint = %q", ep)
	}
	if m, _, _ := unstructured.NestedString(got.Object, "status", "servedModelName"); m != "step-900" {
		t.Errorf("status.servedModelName = %q, want step-900", m)
	}
	// The children are what render gives, field for field: the server runs as a service account
	// of its own, fenced by a NetworkPolicy.
	rendered, err := render.Object(got, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range rendered.Objects {
		if err := engine.StampChild(got, o); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, o.GetKind())
	}
	if want := []string{"ServiceAccount", "Deployment", "Service", "NetworkPolicy"}; !cmp.Equal(kinds, want) {
		t.Errorf("children %v, want %v", kinds, want)
	}
	for _, want := range rendered.Objects {
		live := getObj(t, ctx, evalsi.ChildResources[want.GetKind()], ns, want.GetName())
		why, err := engine.Staleness(want, live)
		if err != nil {
			t.Fatal(err)
		}
		if why != "" {
			t.Errorf("%s %s is not as rendered: %s", want.GetKind(), want.GetName(), why)
		}
	}
	svc := getObj(t, ctx, evalsi.Services, ns, "step-900-vllm")
	if sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector"); sel["app.kubernetes.io/instance"] != "step-900" {
		t.Errorf("Service selector = %v", sel)
	}

	// A spec change is Ready only once the new revision serves.
	mergePatch(t, ctx, evalsi.CheckpointServers, ns, "step-900", `{"spec":{"servedModelName":"run1-step900"}}`)
	got = waitReady(t, ctx, evalsi.CheckpointServers, ns, "step-900", "True", "Serving")
	if m, _, _ := unstructured.NestedString(got.Object, "status", "servedModelName"); m != "run1-step900" {
		t.Errorf("status.servedModelName = %q, want run1-step900", m)
	}
	d := getObj(t, ctx, evalsi.Deployments, ns, "step-900-vllm")
	if g, _, _ := unstructured.NestedInt64(d.Object, "status", "observedGeneration"); g != d.GetGeneration() {
		t.Errorf("Ready while the Deployment's observedGeneration %d < generation %d", g, d.GetGeneration())
	}

	// Deleting the resource removes its children.
	if err := client(evalsi.CheckpointServers, ns).Delete(ctx, "step-900", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "children deleted", func() error {
		for _, gvr := range []schema.GroupVersionResource{evalsi.ServiceAccounts, evalsi.Deployments, evalsi.Services, evalsi.NetworkPolicies} {
			if _, err := client(gvr, ns).Get(ctx, "step-900-vllm", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s still there (%v)", gvr.Resource, err)
			}
		}
		return nil
	})
}

func TestSandboxClassRungs(t *testing.T) {
	ctx := testContext(t)
	sandbox := newNamespace(t, ctx, testOptions.SandboxNamespace)
	startEngine(t, Config{Controllers: []string{"sandboxclass"}})
	create(t, ctx, evalsi.SandboxClasses, "", "SandboxClass", "per-trial", map[string]any{"rung": "pod", "trialImages": []any{"python:3.13-slim"}, "allowedNamespaces": map[string]any{}})
	create(t, ctx, evalsi.SandboxClasses, "", "SandboxClass", "bwrap", map[string]any{"rung": "bubblewrap", "replicas": int64(2), "allowedNamespaces": map[string]any{}})
	t.Cleanup(func() {
		for _, n := range []string{"per-trial", "bwrap"} {
			client(evalsi.SandboxClasses, "").Delete(ctx, n, metav1.DeleteOptions{})
		}
	})
	// The pod rung's pool is its launcher, beside its Role and its trial shape.
	waitReady(t, ctx, evalsi.SandboxClasses, "", "per-trial", "True", "Available")
	for gvr, name := range map[schema.GroupVersionResource]string{evalsi.Deployments: "sandbox-per-trial",
		evalsi.Roles: "sandbox-per-trial-launcher", evalsi.RoleBindings: "sandbox-per-trial-launcher", evalsi.PodTemplates: "sandbox-per-trial-trial"} {
		getObj(t, ctx, gvr, sandbox, name)
	}
	got := waitReady(t, ctx, evalsi.SandboxClasses, "", "bwrap", "True", "Available")
	if n, _, _ := unstructured.NestedString(got.Object, "status", "namespace"); n != sandbox {
		t.Errorf("status.namespace = %q, want %q", n, sandbox)
	}
	d := getObj(t, ctx, evalsi.Deployments, sandbox, "sandbox-bwrap")
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if p, _, _ := unstructured.NestedBool(cs[0].(map[string]any), "securityContext", "privileged"); !p {
		t.Error("bubblewrap without user namespaces is not privileged")
	}
	// Deleting the cluster-scoped owner garbage-collects the pool in the sandbox namespace.
	if err := client(evalsi.SandboxClasses, "").Delete(ctx, "bwrap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "pool deleted", func() error {
		if _, err := client(evalsi.Deployments, sandbox).Get(ctx, "sandbox-bwrap", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pool still there (%v)", err)
		}
		return nil
	})
}

func TestControllerWithoutCRDStaysOffUntilInstalled(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	if err := env.UninstallCRDs(ctx, "checkpointservers.evals.si"); err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, Config{Namespace: ns})
	// /readyz asks Synced all along, while discovery starts the controller of the CRD installed
	// below. (A controller once was published before its informer was set, a nil dereference
	// in a window of microseconds: this exercises that path, under -race, but cannot hit the
	// window reliably; startController publishes only a built controller.)
	polling, stopPolling := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for polling.Err() == nil {
			e.Synced()
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { stopPolling(); <-polled }()
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "judge", map[string]any{})
	waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "True", "Available")
	off := 0
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, "controller off") && strings.Contains(line, "controller=checkpointserver") {
			off++
		}
	}
	if off != 1 {
		t.Errorf("%d 'controller off' lines for checkpointserver, want 1:\n%s", off, e.logs.String())
	}
	if err := env.InstallCRDs(ctx, crdDir+"/checkpointservers.yaml"); err != nil {
		t.Fatal(err)
	}
	create(t, ctx, evalsi.CheckpointServers, ns, "CheckpointServer", "m", map[string]any{"model": "Qwen/Qwen2.5-0.5B"})
	waitReady(t, ctx, evalsi.CheckpointServers, ns, "m", "True", "Serving")
}

func TestNamespaceRestriction(t *testing.T) {
	ctx := testContext(t)
	mine, other := newNamespace(t, ctx, ""), newNamespace(t, ctx, "")
	startEngine(t, Config{Namespace: mine})
	create(t, ctx, evalsi.Evaluators, other, "Evaluator", "theirs", map[string]any{})
	create(t, ctx, evalsi.Evaluators, mine, "Evaluator", "ours", map[string]any{})
	waitReady(t, ctx, evalsi.Evaluators, mine, "ours", "True", "Available")
	time.Sleep(500 * time.Millisecond)
	if _, ok := getObj(t, ctx, evalsi.Evaluators, other, "theirs").Object["status"]; ok {
		t.Error("an engine restricted to another namespace wrote the status")
	}
}

// TestRefusedPodsAreSaid runs pools in a namespace that enforces the restricted Pod Security
// level: an Evaluator's pods meet it and roll out; a CheckpointServer's vLLM pods run as the
// image's user (root), which the API server refuses, and its Ready condition says so with the
// API server's words (without the name of the refused pod, which changes at each try), where
// the Deployment's replica counts alone would only say 0 of 1.
func TestRefusedPodsAreSaid(t *testing.T) {
	ctx := testContext(t)
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"generateName": "restricted-", "labels": map[string]any{"pod-security.kubernetes.io/enforce": "restricted"}}}}
	got, err := client(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "").Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := got.GetName()
	startEngine(t, Config{Namespace: name})
	create(t, ctx, evalsi.Evaluators, name, "Evaluator", "judge", map[string]any{"replicas": int64(1)})
	create(t, ctx, evalsi.CheckpointServers, name, "CheckpointServer", "rooted", map[string]any{"model": "adapter-step-900"})
	waitReady(t, ctx, evalsi.Evaluators, name, "judge", "True", "Available")
	clustertest.Eventually(t, ctx, "the refusal said", func() error {
		obj := getObj(t, ctx, evalsi.CheckpointServers, name, "rooted")
		status, reason, msg := readyCondition(obj)
		if status != "False" || reason != evalsi.ReasonRollingOut ||
			!strings.HasPrefix(msg, `Deployment rooted-vllm cannot create its pods: violates PodSecurity "restricted`) {
			return fmt.Errorf("Ready=%s %s: %s", status, reason, msg)
		}
		return nil
	})
}

// TestOrphanedChildrenStayOrphans deletes an Evaluator with its children orphaned while a
// finalizer of another's keeps it from going: the garbage collector takes its owner reference
// off the Deployment, and the engine, reconciling the Evaluator being deleted again and again,
// must not put it back; once the Evaluator is gone, the Deployment stays.
func TestOrphanedChildrenStayOrphans(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	e := startEngine(t, Config{Namespace: ns})
	const hold = "test.evals.si/hold"
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": "judge", "finalizers": []any{hold}},
		"spec":     map[string]any{"replicas": int64(1)},
	}}
	if _, err := client(evalsi.Evaluators, ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "True", "Available")
	orphan := metav1.DeletePropagationOrphan
	if err := client(evalsi.Evaluators, ns).Delete(ctx, "judge", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the Deployment orphaned", func() error {
		if refs := getObj(t, ctx, evalsi.Deployments, ns, "judge-evaluator").GetOwnerReferences(); len(refs) != 0 {
			return fmt.Errorf("owners %v", refs)
		}
		return nil
	})
	// A few reconciles of the Evaluator being deleted, each a chance to put the reference back:
	// each queued by a change of its annotations.
	before := e.Metrics().ReconcileCount("evaluator", "success")
	for i := range 3 {
		mergePatch(t, ctx, evalsi.Evaluators, ns, "judge", fmt.Sprintf(`{"metadata":{"annotations":{"test.evals.si/nudge":"%d"}}}`, i))
		clustertest.Eventually(t, ctx, "the Evaluator reconciled again", func() error {
			if n := e.Metrics().ReconcileCount("evaluator", "success"); n <= before {
				return fmt.Errorf("%v reconciles", n)
			}
			before = e.Metrics().ReconcileCount("evaluator", "success")
			return nil
		})
	}
	if refs := getObj(t, ctx, evalsi.Deployments, ns, "judge-evaluator").GetOwnerReferences(); len(refs) != 0 {
		t.Fatalf("the orphan's owner reference put back: %v", refs)
	}
	mergePatch(t, ctx, evalsi.Evaluators, ns, "judge", `{"metadata":{"finalizers":null}}`)
	waitGone(t, ctx, evalsi.Evaluators, ns, "judge")
	if d := getObj(t, ctx, evalsi.Deployments, ns, "judge-evaluator"); len(d.GetOwnerReferences()) != 0 {
		t.Errorf("the orphan names an owner: %v", d.GetOwnerReferences())
	}
}

// TestTrialShapeOutlivesTheLaunchersBinding deletes a pod rung class in the background (as
// kubectl and helm do) while its launcher's RoleBinding is held by a finalizer of the test's: the
// garbage collector, which deletes a class's children in no set order, keeps the trial shape
// until the binding is gone, because the shape is the binding's dependent too
// (evalsi.AnnotationOutlives). Without that, a launcher whose shape went first could create pods
// that the trial admission policy no longer shapes: the policy cannot tell a missing shape of its
// class from another class's shape. (A foreground deletion deletes dependents first, down the
// chain: there the shape still goes before the binding.)
func TestTrialShapeOutlivesTheLaunchersBinding(t *testing.T) {
	ctx := testContext(t)
	sandbox := newNamespace(t, ctx, testOptions.SandboxNamespace)
	startEngine(t, Config{Controllers: []string{"sandboxclass"}})
	const hold = "test.evals.si/hold"
	for _, propagation := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground} {
		t.Run(string(propagation), func(t *testing.T) {
			name := "outlives-" + strings.ToLower(string(propagation))
			binding, shape := "sandbox-"+name+"-launcher", "sandbox-"+name+"-trial"
			create(t, ctx, evalsi.SandboxClasses, "", "SandboxClass", name, map[string]any{"rung": "pod", "trialImages": []any{"python:3.13-slim"}, "allowedNamespaces": map[string]any{}})
			clustertest.Eventually(t, ctx, "the trial shape a dependent of the launcher's binding", func() error {
				s, err := client(evalsi.PodTemplates, sandbox).Get(ctx, shape, metav1.GetOptions{})
				if err != nil {
					return err
				}
				for _, r := range s.GetOwnerReferences() {
					if r.Kind == "RoleBinding" && r.Name == binding {
						return nil
					}
				}
				return fmt.Errorf("owner references %v", s.GetOwnerReferences())
			})
			bindings := client(evalsi.RoleBindings, sandbox)
			if _, err := bindings.Patch(ctx, binding, types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+hold+`"]}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			release := func() {
				bindings.Patch(context.WithoutCancel(ctx), binding, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			defer release()
			if err := client(evalsi.SandboxClasses, "").Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &propagation}); err != nil {
				t.Fatal(err)
			}
			// The garbage collector has acted on the class's children once the launcher's
			// Deployment is gone and its binding is being deleted.
			clustertest.Eventually(t, ctx, "the launcher gone and its binding held", func() error {
				if _, err := client(evalsi.Deployments, sandbox).Get(ctx, "sandbox-"+name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("the launcher's Deployment is still there (%v)", err)
				}
				b, err := bindings.Get(ctx, binding, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if b.GetDeletionTimestamp() == nil {
					return errors.New("the binding is not being deleted")
				}
				return nil
			})
			for range 20 {
				s, err := client(evalsi.PodTemplates, sandbox).Get(ctx, shape, metav1.GetOptions{})
				if err != nil || s.GetDeletionTimestamp() != nil {
					t.Fatalf("the trial shape went while the launcher's binding was there: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			release()
			clustertest.Eventually(t, ctx, "the trial shape gone after the binding", func() error {
				if _, err := client(evalsi.PodTemplates, sandbox).Get(ctx, shape, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("still there (%v)", err)
				}
				return nil
			})
		})
	}
}

// TestPoolChildrenGoInTheirKindsOrder holds package workloads' declared order of a pool's
// children (Kind.ChildOrder) to the requests the engine sends: a pod rung class's ServiceAccount
// and trial shape are applied in a wave before its Deployment, Role and the rest; when the class
// leaves the pod rung, its launcher's Role and RoleBinding are deleted before its trial shape.
func TestPoolChildrenGoInTheirKindsOrder(t *testing.T) {
	ctx := testContext(t)
	sandbox := newNamespace(t, ctx, testOptions.SandboxNamespace)
	var mu sync.Mutex
	var sent []string // "PATCH serviceaccounts", "DELETE roles", ...
	rc := rest.CopyConfig(env.Config)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			p := req.URL.Path
			if (req.Method == http.MethodPatch || req.Method == http.MethodDelete) && strings.Contains(p, "/namespaces/"+sandbox+"/") && strings.Contains(p, "sandbox-ordered") {
				parts := strings.Split(p, "/")
				mu.Lock()
				sent = append(sent, req.Method+" "+parts[len(parts)-2])
				mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	startEngine(t, Config{Rest: rc, Controllers: []string{"sandboxclass"}})
	create(t, ctx, evalsi.SandboxClasses, "", "SandboxClass", "ordered", map[string]any{"rung": "pod", "trialImages": []any{"python:3.13-slim"}, "allowedNamespaces": map[string]any{}})
	t.Cleanup(func() { client(evalsi.SandboxClasses, "").Delete(ctx, "ordered", metav1.DeleteOptions{}) })
	waitReady(t, ctx, evalsi.SandboxClasses, "", "ordered", "True", "Available")
	// sentSoFar returns the requests recorded until now, and forgets them.
	sentSoFar := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := sent
		sent = nil
		return out
	}
	applies := sentSoFar()
	first := func(sent []string, resources ...string) int {
		return slices.IndexFunc(sent, func(s string) bool { _, r, _ := strings.Cut(s, " "); return slices.Contains(resources, r) })
	}
	// The first reconcile's applies: the ServiceAccounts and the trial shape, then the rest (a
	// later reconcile applies the trial shape again, owned by its RoleBinding too).
	others := first(applies, "deployments", "roles", "rolebindings", "networkpolicies")
	if others < 0 || !slices.Contains(applies[:others], "PATCH serviceaccounts") || !slices.Contains(applies[:others], "PATCH podtemplates") {
		t.Errorf("applies %v: the ServiceAccount and the trial shape do not go before the other children", applies)
	}

	mergePatch(t, ctx, evalsi.SandboxClasses, "", "ordered", `{"spec":{"rung":"bubblewrap","trialImages":null}}`)
	clustertest.Eventually(t, ctx, "the trial shape deleted", func() error {
		if _, err := client(evalsi.PodTemplates, sandbox).Get(ctx, "sandbox-ordered-trial", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	var deletes []string
	for _, s := range sentSoFar() {
		if strings.HasPrefix(s, http.MethodDelete) {
			deletes = append(deletes, s)
		}
	}
	shape := slices.Index(deletes, "DELETE podtemplates")
	if role, binding := slices.Index(deletes, "DELETE roles"), slices.Index(deletes, "DELETE rolebindings"); role != 0 && binding != 0 || role < 0 || binding < 0 || shape != len(deletes)-1 {
		t.Errorf("deletions %v: the launcher's Role and RoleBinding do not go first and its trial shape last", deletes)
	}
}
