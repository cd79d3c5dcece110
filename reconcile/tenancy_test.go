package reconcile

import (
	"context"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
)

// asNamespaceEditor returns a client that acts as user in namespace ns, with a Role that lets it
// write every evals.si kind there (what the aggregated edit role gives), and nothing else.
func asNamespaceEditor(t *testing.T, ctx context.Context, ns, user string) dynamic.Interface {
	t.Helper()
	cs := env.Clientset()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "evals-editor", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"evals.si"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "evals-editor", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: user}},
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A new RoleBinding reaches the authorizer a moment later.
	clustertest.Eventually(t, ctx, user+" may write evals.si objects", func() error {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: evalsi.Group, Resource: "evalruns"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("not yet allowed")
		}
		return nil
	})
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEditorCannotActInAnotherProject has an editor of one namespace label an object of every
// kind that uses a project with another team's project: no call reaches evalsid in that project,
// no child is made, and each object says ProjectNotAllowed. Once a cluster administrator binds
// the namespace to that project (a Namespace label), the same objects become Ready without being
// recreated.
func TestEditorCannotActInAnotherProject(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	other := "team-a-" + ns
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig(ns)
	cfg.Controllers = []string{"evalrun", "onlineevalpolicy", "tracesource", "evaluator"}
	startEngine(t, cfg)
	bob := asNamespaceEditor(t, ctx, ns, "bob")

	objects := []struct {
		gvr  schema.GroupVersionResource
		kind string
		spec map[string]any
	}{
		{evalsi.EvalRuns, "EvalRun", runSpec(nil)},
		{evalsi.OnlineEvalPolicies, "OnlineEvalPolicy", map[string]any{"traceSource": "prod", "samplingRate": 0.1, "evaluators": []any{"toxicity"}}},
		{evalsi.TraceSources, "TraceSource", map[string]any{"type": "otlp"}},
		{evalsi.Evaluators, "Evaluator", map[string]any{"replicas": int64(1)}},
	}
	uids := map[string]types.UID{}
	for _, o := range objects {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "evals.si/v1alpha1", "kind": o.kind,
			"metadata": map[string]any{"name": "borrowed-" + ns, "labels": map[string]any{evalsi.LabelProject: other}},
			"spec":     o.spec,
		}}
		got, err := bob.Resource(o.gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("bob creating %s: %v", o.kind, err)
		}
		uids[o.kind] = got.GetUID()
	}
	for _, o := range objects {
		got := waitReady(t, ctx, o.gvr, ns, "borrowed-"+ns, "False", "ProjectNotAllowed")
		if _, _, msg := readyCondition(got); msg == "" {
			t.Errorf("%s: ProjectNotAllowed without a message", o.kind)
		}
	}
	for _, call := range api.CallLog() {
		t.Errorf("evalsid was called (%s in project %q) for objects whose project is not allowed", call.Method, call.Project)
	}
	if _, err := client(evalsi.Deployments, ns).Get(ctx, "borrowed-"+ns+"-evaluator", metav1.GetOptions{}); err == nil {
		t.Error("a Deployment was made for an Evaluator whose project is not allowed")
	}
	events, err := env.Clientset().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=ProjectNotAllowed"})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("no ProjectNotAllowed event (%v)", err)
	}

	// The administrator binds the namespace to the project.
	mergePatch(t, ctx, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", ns,
		fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, evalsi.LabelProject, other))
	waitPhase(t, ctx, ns, "borrowed-"+ns, "Pending")
	waitReady(t, ctx, evalsi.OnlineEvalPolicies, ns, "borrowed-"+ns, "True", "Applied")
	waitReady(t, ctx, evalsi.TraceSources, ns, "borrowed-"+ns, "True", "Applied")
	waitReady(t, ctx, evalsi.Evaluators, ns, "borrowed-"+ns, "True", "Available")
	for _, o := range objects {
		if uid := getObj(t, ctx, o.gvr, ns, "borrowed-"+ns).GetUID(); uid != uids[o.kind] {
			t.Errorf("%s was recreated", o.kind)
		}
	}
	for _, call := range api.CallLog() {
		if call.Project != other {
			t.Errorf("%s in project %q, want %q", call.Method, call.Project, other)
		}
	}
	if runs := api.Runs(); len(runs) != 1 || runs[0].Project != other {
		t.Errorf("runs %v, want one in %s", runs, other)
	}
	clustertest.Eventually(t, ctx, "the evaluator's project", func() error {
		d := getObj(t, ctx, evalsi.Deployments, ns, "borrowed-"+ns+"-evaluator")
		env, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		for _, e := range env[0].(map[string]any)["env"].([]any) {
			if m := e.(map[string]any); m["name"] == "EVALSI_PROJECT" && m["value"] != other {
				return fmt.Errorf("EVALSI_PROJECT = %v", m["value"])
			}
		}
		return nil
	})
}

// TestSandboxClassAllowedNamespaces names, from an Evaluator and an EvalRun, a SandboxClass whose
// allowedNamespaces does not select their namespace: both are ClassNotAllowed, no Deployment is
// made and no run is created; a class that does not exist is ClassNotFound. Labelling the
// namespace makes them Ready without recreating them.
func TestSandboxClassAllowedNamespaces(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	class := "restricted-" + ns
	create(t, ctx, evalsi.SandboxClasses, "", "SandboxClass", class, map[string]any{
		"rung":              "pod",
		"allowedNamespaces": map[string]any{"matchLabels": map[string]any{"sandbox.evals.si/" + class: "allowed"}},
	})
	t.Cleanup(func() { client(evalsi.SandboxClasses, "").Delete(context.Background(), class, metav1.DeleteOptions{}) })
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig(ns)
	cfg.Controllers = []string{"evalrun", "evaluator"}
	startEngine(t, cfg)
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "judge", map[string]any{"replicas": int64(1), "sandboxClass": class})
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "typo", map[string]any{"replicas": int64(1), "sandboxClass": "no-such-class"})
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "smoke", runSpec(map[string]any{"sandboxClass": class}))
	waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "False", "ClassNotAllowed")
	waitReady(t, ctx, evalsi.EvalRuns, ns, "smoke", "False", "ClassNotAllowed")
	waitReady(t, ctx, evalsi.Evaluators, ns, "typo", "False", "ClassNotFound")
	if _, err := client(evalsi.Deployments, ns).Get(ctx, "judge-evaluator", metav1.GetOptions{}); err == nil {
		t.Error("a Deployment uses a SandboxClass its namespace may not use")
	}
	if n := api.Calls("CreateRun"); n != 0 {
		t.Errorf("%d runs created with a SandboxClass the namespace may not use", n)
	}

	mergePatch(t, ctx, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", ns,
		fmt.Sprintf(`{"metadata":{"labels":{"sandbox.evals.si/%s":"allowed"}}}`, class))
	waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "True", "Available")
	waitPhase(t, ctx, ns, "smoke", "Pending")
	if runs := api.Runs(); len(runs) != 1 || runs[0].Spec.SandboxClass != class {
		t.Errorf("runs %v, want one in SandboxClass %s", runs, class)
	}
}

// TestWaitersGoOnWhenTheirClassComes creates an EvalRun and an Evaluator naming a SandboxClass
// that does not exist yet (ClassNotFound), then the class: the operator runs the SandboxClass
// controller too, so the class's arrival reconciles both (Kind.Refers). Their look again is an
// hour and there is no resync, so nothing else can make them go on within the test.
func TestWaitersGoOnWhenTheirClassComes(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	class := "late-" + ns
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig(ns)
	cfg.Controllers = []string{"evalrun", "evaluator", "sandboxclass"}
	cfg.ClassRecheck, cfg.Resync = time.Hour, time.Hour
	startEngine(t, cfg)
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "early", runSpec(map[string]any{"sandboxClass": class}))
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "early", map[string]any{"replicas": int64(1), "sandboxClass": class})
	waitReady(t, ctx, evalsi.EvalRuns, ns, "early", "False", "ClassNotFound")
	waitReady(t, ctx, evalsi.Evaluators, ns, "early", "False", "ClassNotFound")

	created := time.Now()
	create(t, ctx, evalsi.SandboxClasses, "", "SandboxClass", class, map[string]any{"rung": "pod", "trialImages": []any{"python:3.13-slim"}, "allowedNamespaces": map[string]any{}})
	t.Cleanup(func() { client(evalsi.SandboxClasses, "").Delete(context.Background(), class, metav1.DeleteOptions{}) })
	waitPhase(t, ctx, ns, "early", "Pending")
	waitReady(t, ctx, evalsi.Evaluators, ns, "early", "True", "Available")
	t.Logf("the EvalRun and the Evaluator went on %.1fs after their SandboxClass came", time.Since(created).Seconds())
}
