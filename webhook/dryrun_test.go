package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"

	"evals.si/operator/internal/specgen"
	"evals.si/operator/render"
)

// generatedPerKind is how many specs of each workload kind the generator draws; about a fifth
// to a third of them pass validation.
const generatedPerKind = 1500

// TestChildrenPassServerDryRun is the property that admission accepts only what the API server
// takes: every valid admission case, every example, and every generated spec that validation
// accepts renders children that the real API server (with KEDA's ScaledObject CRD) takes with
// dryRun=All. A refusal prints the spec and the generator's seed. The dry runs ask for
// fieldValidation=Strict, the check the operator's applies skip (evalsi.ChildFieldValidation is
// Ignore): here a key written twice would be refused rather than warned of.
func TestChildrenPassServerDryRun(t *testing.T) {
	ctx := testContext(t)
	if err := env.InstallKedaCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	ns := ensureNamespace(t, ctx, "dry-run")
	opts := render.Options{
		DefaultImage:     "evalsi/platform:1.4.0",
		VLLMImage:        "vllm/vllm-openai:v0.11.0",
		SandboxNamespace: ensureNamespace(t, ctx, "evalsi-sandbox"),
		APIURL:           "http://evalsid.evalsi.svc:8080",
		Autoscaling:      true,
	}
	refused := 0
	check := func(what string, obj *unstructured.Unstructured) bool {
		if obj.GetKind() != "SandboxClass" {
			obj.SetNamespace(ns)
		}
		obj.SetUID(types.UID("00000000-0000-0000-0000-000000000001"))
		if render.Validate(obj, render.Limits{}) != nil {
			return false
		}
		res, err := render.Object(obj, opts)
		if err != nil {
			t.Errorf("%s: validation accepted what rendering refused: %v", what, err)
			return true
		}
		for _, child := range res.Objects {
			if err := engine.StampChild(obj, child); err != nil {
				t.Fatal(err)
			}
			err := dryRunApply(ctx, env.Dynamic(), evalsi.ChildResources[child.GetKind()], child, metav1.FieldValidationStrict)
			if err != nil {
				refused++
				spec, _ := json.Marshal(obj.Object["spec"])
				t.Errorf("%s: the API server refused %s %s: %v\nspec: %s", what, child.GetKind(), child.GetName(), err, spec)
			}
		}
		return true
	}

	for _, path := range []string{"../testdata/admission/valid.yaml", "../testdata/examples"} {
		for _, d := range readCases(t, path) {
			if d.Object.GroupVersionKind().Group == evalsi.Group {
				check(d.Where(), d.Object)
			}
		}
	}
	for _, kind := range []string{"Evaluator", "SandboxClass", "CheckpointServer"} {
		accepted := 0
		for seed := range uint64(generatedPerKind) {
			g := specgen.New(seed)
			spec := map[string]func() map[string]any{
				"Evaluator": g.Evaluator, "SandboxClass": g.SandboxClass, "CheckpointServer": g.CheckpointServer,
			}[kind]()
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "evals.si/v1alpha1", "kind": kind,
				"metadata": map[string]any{"name": fmt.Sprintf("gen-%d", seed)}, "spec": spec,
			}}
			if check(fmt.Sprintf("%s seed %d", kind, seed), obj) {
				accepted++
			}
		}
		t.Logf("%s: %d of %d generated specs passed validation and were dry-run", kind, accepted, generatedPerKind)
		if accepted < 200 {
			t.Errorf("%s: only %d generated specs passed validation; the property needs at least 200", kind, accepted)
		}
	}
	if refused > 0 {
		t.Errorf("the API server refused %d children of specs that validation accepted", refused)
	}
}

// TestAdmissionDryRunsChildren has the webhook dry-run the children of workload objects: an
// Evaluator whose Deployment a cluster policy refuses is refused at admission with the policy's
// message; one it takes is admitted; and when the dry run cannot say (the webhook may not create
// Deployments), the object is admitted with a warning, since the operator reports a refusal too.
func TestAdmissionDryRunsChildren(t *testing.T) {
	ctx := testContext(t)
	ns := ensureNamespace(t, ctx, "dry-run-admission")
	clustertest.RefuseImages(t, ctx, env, ns, "registry.example/unapproved/")
	opts := render.Options{DefaultImage: "evalsi/platform:1.4.0", SandboxNamespace: "evalsi-sandbox", APIURL: "http://evalsid:8080", Autoscaling: true}
	evaluator := func(name, image string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"replicas": int64(1), "image": image},
		}}
	}
	t.Run("refused", func(t *testing.T) {
		wh := startWebhook(t, ctx, time.Hour, func(c *Config) {
			c.DryRun = &DryRun{Client: env.Dynamic(), Render: opts, Timeout: 2 * time.Second}
		})
		defer wh.stop()
		err := create(ctx, env.Dynamic(), evaluator("unapproved", "registry.example/unapproved/judge:1"))
		if err == nil || !strings.Contains(err.Error(), "images come from an approved registry") {
			t.Errorf("an Evaluator whose Deployment a policy refuses: %v, want the policy's refusal", err)
		}
		if err := create(ctx, env.Dynamic(), evaluator("approved", "registry.example/approved/judge:1")); err != nil {
			t.Errorf("an Evaluator whose Deployment the API server takes: %v", err)
		}
	})
	t.Run("name-taken", func(t *testing.T) {
		// A team's own Deployment named like the Evaluator's: the apply fails on its selector,
		// and the refusal says that the name is taken rather than only "field is immutable".
		team := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "held-evaluator", "namespace": ns},
			"spec": map[string]any{
				"selector": map[string]any{"matchLabels": map[string]any{"app": "team-database"}},
				"template": map[string]any{
					"metadata": map[string]any{"labels": map[string]any{"app": "team-database"}},
					"spec":     map[string]any{"containers": []any{map[string]any{"name": "db", "image": "registry.example/approved/db:1"}}},
				},
			},
		}}
		if _, err := env.Dynamic().Resource(evalsi.ChildResources["Deployment"]).Namespace(ns).Create(ctx, team, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		wh := startWebhook(t, ctx, time.Hour, func(c *Config) {
			c.DryRun = &DryRun{Client: env.Dynamic(), Render: opts, Timeout: 2 * time.Second}
		})
		defer wh.stop()
		err := create(ctx, env.Dynamic(), evaluator("held", "registry.example/approved/judge:1"))
		if err == nil || !strings.Contains(err.Error(), "a Deployment named held-evaluator already exists in "+ns) {
			t.Errorf("an Evaluator whose Deployment's name a team's Deployment holds: %v, want a refusal saying the name is taken", err)
		}
	})
	t.Run("cannot-say", func(t *testing.T) {
		nobody := rest.CopyConfig(env.Config)
		nobody.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
		wh := startWebhook(t, ctx, time.Hour, func(c *Config) {
			c.DryRun = &DryRun{Client: dynamic.NewForConfigOrDie(nobody), Render: opts, Timeout: 2 * time.Second}
		})
		defer wh.stop()
		warnings := &warningRecorder{}
		cfg := rest.CopyConfig(env.Config)
		cfg.WarningHandler = warnings
		if err := create(ctx, dynamic.NewForConfigOrDie(cfg), evaluator("unchecked", "registry.example/unapproved/judge:1")); err != nil {
			t.Errorf("with a dry run that cannot say: %v, want admitted", err)
		}
		if !strings.Contains(warnings.String(), "could not dry-run the Deployment") {
			t.Errorf("warnings %q, want one saying the dry run could not say", warnings.String())
		}
	})
}

// warningRecorder keeps the warnings the API server sends.
type warningRecorder struct {
	mu   sync.Mutex
	text strings.Builder
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, message string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text.WriteString(message + "\n")
}

func (w *warningRecorder) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.text.String()
}

// TestAdmissionRefusesAnotherProject creates an EvalRun labelled with a project its namespace is
// not bound to: admission refuses it naming the label, and admits it once a cluster administrator
// binds the namespace to that project.
func TestAdmissionRefusesAnotherProject(t *testing.T) {
	ctx := testContext(t)
	startWebhook(t, ctx, time.Hour)
	ns := ensureNamespace(t, ctx, "team-b")
	run := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
		"metadata": map[string]any{"name": "borrowed", "namespace": ns, "labels": map[string]any{"evals.si/project": "team-a"}},
		"spec":     map[string]any{"suite": "smoke", "target": map[string]any{"endpoint": map[string]any{"url": "http://model:8000/v1", "model": "m"}}},
	}}
	err := create(ctx, env.Dynamic(), run)
	if err == nil || !strings.Contains(err.Error(), "/metadata/labels/evals.si~1project: namespace team-b acts in project team-b, not team-a") {
		t.Fatalf("creating an EvalRun in another project: %v, want a refusal naming the label", err)
	}
	patch := []byte(`{"metadata":{"labels":{"evals.si/project":"team-a"}}}`)
	if _, err := env.Clientset().CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "admitted once the namespace is bound", func() error {
		return create(ctx, env.Dynamic(), run)
	})
}

// TestAdmissionRefusesANamespaceNamedLikeABoundProject has someone who may create namespaces make
// team-s, named like a project whose one namespace, team-s-prod, is bound to it by label: an
// EvalRun in team-s is refused as acting in no project, and admitted once the namespace carries
// the binding label itself.
func TestAdmissionRefusesANamespaceNamedLikeABoundProject(t *testing.T) {
	ctx := testContext(t)
	startWebhook(t, ctx, time.Hour)
	prod := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-s-prod", Labels: map[string]string{evalsi.LabelProject: "team-s"}}}
	if _, err := env.Clientset().CoreV1().Namespaces().Create(ctx, prod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const ns = "team-s"
	if _, err := env.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
		"metadata": map[string]any{"name": "squatted", "namespace": ns},
		"spec":     map[string]any{"suite": "smoke", "target": map[string]any{"endpoint": map[string]any{"url": "http://model:8000/v1", "model": "m"}}},
	}}
	const want = "/metadata/namespace: namespace team-s acts in no project"
	clustertest.Eventually(t, ctx, "the EvalRun in team-s refused (once the webhook has read team-s-prod)", func() error {
		err := create(ctx, env.Dynamic(), run)
		if err == nil {
			if err := env.Dynamic().Resource(evalsi.EvalRuns).Namespace(ns).Delete(ctx, "squatted", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			return errors.New("admitted")
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("creating an EvalRun in team-s: %v, want a refusal saying %q", err, want)
		}
		return nil
	})
	patch := []byte(`{"metadata":{"labels":{"evals.si/project":"team-s"}}}`)
	if _, err := env.Clientset().CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "admitted once team-s is bound by label", func() error {
		return create(ctx, env.Dynamic(), run)
	})
}
