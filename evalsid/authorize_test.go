package evalsid_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/apiclient/evalsiv1/evalsiv1connect"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
)

// api is a client of evalsid's three services that signs every call with one token.
type api struct {
	runs    evalsiv1connect.RunServiceClient
	monitor evalsiv1connect.MonitorServiceClient
	queues  evalsiv1connect.QueueServiceClient
}

func newAPI(url, token string) api {
	opt := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	}))
	return api{
		runs:    evalsiv1connect.NewRunServiceClient(http.DefaultClient, url, opt),
		monitor: evalsiv1connect.NewMonitorServiceClient(http.DefaultClient, url, opt),
		queues:  evalsiv1connect.NewQueueServiceClient(http.DefaultClient, url, opt),
	}
}

// code is the Connect code of err, 0 for none.
func code(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

func runSpec(class string) *v1.RunSpec {
	return &v1.RunSpec{Suite: "smoke", SandboxClass: class,
		Target: &v1.Target{Endpoint: &v1.EndpointTarget{Url: "http://m:8000/v1", Model: "m"}}}
}

// calls are every method of evalsid, each made against project with what it needs.
func calls(project, runID string) map[string]func(context.Context, api) error {
	return map[string]func(context.Context, api) error{
		"CreateRun": func(ctx context.Context, a api) error {
			_, err := a.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{Project: project, IdempotencyKey: "k-" + project, Creator: "alice", Spec: runSpec("")}))
			return err
		},
		"GetRun": func(ctx context.Context, a api) error {
			_, err := a.runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: project, Id: runID}))
			return err
		},
		"BatchGetRuns": func(ctx context.Context, a api) error {
			_, err := a.runs.BatchGetRuns(ctx, connect.NewRequest(&v1.BatchGetRunsRequest{Project: project, Ids: []string{runID}}))
			return err
		},
		"CancelRun": func(ctx context.Context, a api) error {
			_, err := a.runs.CancelRun(ctx, connect.NewRequest(&v1.CancelRunRequest{Project: project, Id: runID}))
			return err
		},
		"PutPolicy": func(ctx context.Context, a api) error {
			_, err := a.monitor.PutPolicy(ctx, connect.NewRequest(&v1.PutPolicyRequest{Project: project, Name: project + "-toxicity", Creator: "alice", Owner: project + "/toxicity",
				Spec: &v1.PolicySpec{TraceSource: "prod", SamplingRate: 0.5}}))
			return err
		},
		"GetPolicy": func(ctx context.Context, a api) error {
			_, err := a.monitor.GetPolicy(ctx, connect.NewRequest(&v1.GetPolicyRequest{Project: project, Name: project + "-toxicity"}))
			return err
		},
		"DeletePolicy": func(ctx context.Context, a api) error {
			_, err := a.monitor.DeletePolicy(ctx, connect.NewRequest(&v1.DeletePolicyRequest{Project: project, Name: project + "-toxicity", Owner: project + "/toxicity"}))
			return err
		},
		"PutTraceSource": func(ctx context.Context, a api) error {
			_, err := a.monitor.PutTraceSource(ctx, connect.NewRequest(&v1.PutTraceSourceRequest{Project: project, Name: "prod", Owner: project + "/prod", Spec: &v1.TraceSourceSpec{Type: "otlp"}}))
			return err
		},
		"GetTraceSource": func(ctx context.Context, a api) error {
			_, err := a.monitor.GetTraceSource(ctx, connect.NewRequest(&v1.GetTraceSourceRequest{Project: project, Name: "prod"}))
			return err
		},
		"DeleteTraceSource": func(ctx context.Context, a api) error {
			_, err := a.monitor.DeleteTraceSource(ctx, connect.NewRequest(&v1.DeleteTraceSourceRequest{Project: project, Name: "prod", Owner: project + "/prod"}))
			return err
		},
		"GetQueueDepth": func(ctx context.Context, a api) error {
			_, err := a.queues.GetQueueDepth(ctx, connect.NewRequest(&v1.GetQueueDepthRequest{Project: project, Namespace: project, Kind: v1.PoolKind_POOL_KIND_EVALUATOR, Name: "judge"}))
			return err
		},
		"EnqueueTrial": func(ctx context.Context, a api) error {
			_, err := a.queues.EnqueueTrial(ctx, connect.NewRequest(&v1.EnqueueTrialRequest{Project: project, RunId: runID, SandboxClass: "open", Trial: "case-1/1"}))
			return err
		},
	}
}

// TestProjectBoundaryAtEvalsid holds the reference evalsid to the platform's contract with real
// service-account tokens of the test control plane: a pool, the queue reader and the operator of
// team-b can neither write nor read anything of project team-a; in its own project each identity
// may call only the methods of its role; a binding made on the Namespace moves an identity to the
// bound project (read from a watch); a creator is recorded only from the operator, and an account
// named like the operator in a namespace where none runs is no operator; and a run naming a
// SandboxClass that does not admit the caller's namespace is refused by evalsid.
func TestProjectBoundaryAtEvalsid(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := c.Clientset()
	if err := c.InstallCRDs(ctx, "../chart/evalsi-crds/files/crds"); err != nil {
		t.Fatal(err)
	}
	const notebooks = "team-a-notebooks"
	namespaces := map[string]map[string]string{
		// team-a's namespaces are bound by label, its namesake too.
		"team-a":    {evalsi.LabelProject: "team-a"},
		"team-b":    nil,
		"team-a-ci": {evalsi.LabelProject: "team-a"},
		"trusted":   {"sandbox.evals.si/privileged": "allowed"},
		// Bound to team-a, with no operator: an editor makes an account named like one (below).
		notebooks: {evalsi.LabelProject: "team-a"},
		// team-x's one namespace is bound by label; anyone who may create namespaces made one
		// named like the project, unlabelled.
		"team-x-prod": {evalsi.LabelProject: "team-x"},
		"team-x":      nil,
		// Where SandboxClass pools run: its queue reader reads their shared queues.
		"evalsi-sandbox": nil,
	}
	accounts := []string{evalsi.OperatorServiceAccount, evalsi.QueueReaderServiceAccount, "judge-evaluator"}
	for ns, labels := range namespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, sa := range accounts {
			if ns == notebooks {
				continue
			}
			if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass", "metadata": map[string]any{"name": "privileged"},
		"spec": map[string]any{"rung": "bubblewrap", "allowedNamespaces": map[string]any{"matchLabels": map[string]any{"sandbox.evals.si/privileged": "allowed"}}},
	}}
	if _, err := c.Dynamic().Resource(evalsi.SandboxClasses).Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	open := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass", "metadata": map[string]any{"name": "open"},
		"spec": map[string]any{"rung": "landlock", "allowedNamespaces": map[string]any{}},
	}}
	if _, err := c.Dynamic().Resource(evalsi.SandboxClasses).Create(ctx, open, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(ns, sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"evalsi"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	srv := evalsid.New(nil, evalsid.Schedule{})
	srv.TrustKubernetes(&evalsid.KubernetesIssuer{APIServer: c.Config.Host, Client: hc, Audience: "evalsi"})
	dir, err := evalsid.WatchCluster(ctx, c.Config, "")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetDirectory(dir)
	srv.SetSandboxNamespace("evalsi-sandbox")
	srv.SetOperatorNamespaces("team-a", "team-b", "team-a-ci", "trusted", "team-x", "team-x-prod")
	url := serveLoopback(t, ctx, srv)
	clients := map[string]api{}
	for ns := range namespaces {
		for _, sa := range accounts {
			if ns == notebooks {
				continue
			}
			clients[ns+"/"+sa] = newAPI(url, token(ns, sa))
		}
	}

	// team-a's operator makes what the others will try to reach.
	var runA string
	clustertest.Eventually(t, ctx, "team-a's operator creates a run (once the cluster is read)", func() error {
		resp, err := clients["team-a/evalsi-operator"].runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
			Project: "team-a", IdempotencyKey: "a-1", Creator: "alice", Spec: runSpec("")}))
		if err != nil {
			return err
		}
		runA = resp.Msg.Run.Id
		return nil
	})
	for _, name := range []string{"PutPolicy", "PutTraceSource"} {
		if err := calls("team-a", runA)[name](ctx, clients["team-a/evalsi-operator"]); err != nil {
			t.Fatalf("team-a's operator: %s: %v", name, err)
		}
	}

	t.Run("team-b against project team-a", func(t *testing.T) {
		for _, sa := range accounts {
			for method, call := range calls("team-a", runA) {
				t.Run(sa+"/"+method, func(t *testing.T) {
					if err := call(ctx, clients["team-b/"+sa]); connect.CodeOf(err) != connect.CodePermissionDenied {
						t.Errorf("%v, want PermissionDenied", err)
					}
				})
			}
		}
		if got := srv.Policy("team-a-toxicity"); got == nil || got.Project != "team-a" {
			t.Errorf("team-a's policy after team-b's calls: %v", got)
		}
		if got := srv.Runs(); len(got) != 1 || got[0].Phase == v1.Phase_PHASE_CANCELLED {
			t.Errorf("runs after team-b's calls: %v", got)
		}
	})

	// In its own project, each identity calls only what its role needs.
	allowed := map[string]map[string]bool{
		evalsi.OperatorServiceAccount:    {"CreateRun": true, "GetRun": true, "BatchGetRuns": true, "CancelRun": true, "PutPolicy": true, "GetPolicy": true, "DeletePolicy": true, "PutTraceSource": true, "GetTraceSource": true, "DeleteTraceSource": true},
		evalsi.QueueReaderServiceAccount: {"GetQueueDepth": true},
		"judge-evaluator":                {"GetRun": true, "BatchGetRuns": true, "EnqueueTrial": true},
	}
	t.Run("roles in their own project", func(t *testing.T) {
		for _, sa := range accounts {
			for method, call := range calls("team-a", runA) {
				t.Run(sa+"/"+method, func(t *testing.T) {
					err := call(ctx, clients["team-a/"+sa])
					if allowed[sa][method] {
						if connect.CodeOf(err) == connect.CodePermissionDenied || connect.CodeOf(err) == connect.CodeUnauthenticated {
							t.Errorf("%v, want it allowed", err)
						}
						return
					}
					if connect.CodeOf(err) != connect.CodePermissionDenied {
						t.Errorf("%v, want PermissionDenied", err)
					}
				})
			}
		}
	})

	t.Run("the creator", func(t *testing.T) {
		resp, err := clients["team-b/evalsi-operator"].runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
			Project: "team-b", IdempotencyKey: "b-1", Creator: "bob", Spec: runSpec("")}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Msg.Run.Creator != "bob" {
			t.Errorf("the operator's forwarded creator: %q, want bob", resp.Msg.Run.Creator)
		}
		before := len(srv.Runs())
		_, err = clients["team-b/judge-evaluator"].runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
			Project: "team-b", IdempotencyKey: "b-2", Creator: "alice", Spec: runSpec("")}))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("a pool creating a run credited to alice: %v, want PermissionDenied", err)
		}
		for _, r := range srv.Runs() {
			if r.Project == "team-b" && r.Creator == "alice" {
				t.Errorf("run %s of team-b is credited to alice", r.Id)
			}
		}
		if after := len(srv.Runs()); after != before {
			t.Errorf("%d runs after the pool's call, %d before", after, before)
		}
	})

	t.Run("an account named like the operator where no operator runs", func(t *testing.T) {
		// A namespace editor (the built-in edit role) makes the account and its token.
		if _, err := cs.RbacV1().RoleBindings(notebooks).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "carol-edits"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "carol"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		editorCfg := rest.CopyConfig(c.Config)
		editorCfg.Impersonate = rest.ImpersonationConfig{UserName: "carol", Groups: []string{"system:authenticated"}}
		carol := kubernetes.NewForConfigOrDie(editorCfg)
		var minted string
		clustertest.Eventually(t, ctx, "carol makes an evalsi-operator account and its token", func() error {
			_, err := carol.CoreV1().ServiceAccounts(notebooks).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: evalsi.OperatorServiceAccount}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err // RBAC takes a moment to see the binding
			}
			tr, err := carol.CoreV1().ServiceAccounts(notebooks).CreateToken(ctx, evalsi.OperatorServiceAccount, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"evalsi"}},
			}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			minted = tr.Status.Token
			return nil
		})
		namesake := newAPI(url, minted)
		before := len(srv.Runs())
		_, err := namesake.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
			Project: "team-a", IdempotencyKey: "notebook-1", Creator: "alice", Spec: runSpec("")}))
		if code(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "no operator runs") {
			t.Errorf("creating a run credited to alice: %v, want PermissionDenied saying no operator runs there", err)
		}
		if err := calls("team-a", runA)["PutPolicy"](ctx, namesake); code(err) != connect.CodePermissionDenied {
			t.Errorf("putting a policy: %v, want PermissionDenied", err)
		}
		if after := len(srv.Runs()); after != before {
			t.Errorf("%d runs after its calls, %d before", after, before)
		}
		// It reads runs as a pool does: those of its own namespace, and team-a's run is not one.
		if err := calls("team-a", runA)["GetRun"](ctx, namesake); code(err) != connect.CodeNotFound {
			t.Errorf("reading a run of another namespace of its project: %v, want NotFound", err)
		}
	})

	t.Run("work is dispatched per namespace, not per project", func(t *testing.T) {
		// team-a-ci acts in project team-a, but team-a's run is worked only by team-a's pools: a
		// pool of team-a-ci neither reads it nor sees team-a's queues, and a run team-a-ci's
		// operator makes is team-a-ci's whatever namespace it names.
		pool, reader := clients["team-a-ci/judge-evaluator"], clients["team-a-ci/"+evalsi.QueueReaderServiceAccount]
		if _, err := pool.runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: "team-a", Id: runA})); code(err) != connect.CodeNotFound {
			t.Errorf("team-a-ci's pool reading team-a's run: %v, want NotFound", err)
		}
		batch, err := pool.runs.BatchGetRuns(ctx, connect.NewRequest(&v1.BatchGetRunsRequest{Project: "team-a", Ids: []string{runA}}))
		if err != nil || len(batch.Msg.Runs) != 0 {
			t.Errorf("team-a-ci's pool reading team-a's run in a batch: %v, %v; want it missing", batch, err)
		}
		if _, err := clients["team-a/judge-evaluator"].runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: "team-a", Id: runA})); err != nil {
			t.Errorf("team-a's pool reading team-a's run: %v", err)
		}
		queue := func(namespace string) error {
			_, err := reader.queues.GetQueueDepth(ctx, connect.NewRequest(&v1.GetQueueDepthRequest{Project: "team-a", Namespace: namespace, Kind: v1.PoolKind_POOL_KIND_EVALUATOR, Name: "judge"}))
			return err
		}
		if err := queue("team-a"); code(err) != connect.CodePermissionDenied {
			t.Errorf("team-a-ci's queue reader reading team-a's judge queue: %v, want PermissionDenied", err)
		}
		if err := queue("team-a-ci"); err != nil {
			t.Errorf("team-a-ci's queue reader reading its own judge queue: %v", err)
		}
		resp, err := clients["team-a-ci/evalsi-operator"].runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
			Project: "team-a", IdempotencyKey: "ci-dispatch", Namespace: "team-a", Spec: runSpec("")}))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Msg.Run.Namespace; got != "team-a-ci" {
			t.Errorf("a run team-a-ci's operator made naming namespace team-a is worked in %q, want team-a-ci", got)
		}
		if _, err := pool.runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: "team-a", Id: resp.Msg.Run.Id})); err != nil {
			t.Errorf("team-a-ci's pool reading its own namespace's run: %v", err)
		}
	})

	t.Run("an operator acts on its own namespace's runs and objects only", func(t *testing.T) {
		// team-a-ci acts in project team-a too. An editor of team-a-ci who runs a pod as its
		// operator account neither reads nor cancels team-a's run, nor writes team-a's policy, by
		// naming team-a's object as the owner or by writing as the CLI does, with none.
		owner := clients["team-a/evalsi-operator"]
		made, err := owner.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{Project: "team-a", IdempotencyKey: "a-door", Spec: runSpec("")}))
		if err != nil {
			t.Fatal(err)
		}
		runA := made.Msg.Run.Id
		if _, err := owner.monitor.PutPolicy(ctx, connect.NewRequest(&v1.PutPolicyRequest{Project: "team-a", Name: "team-a-door", Owner: "team-a/door",
			Spec: &v1.PolicySpec{TraceSource: "prod", SamplingRate: 0.5}})); err != nil {
			t.Fatal(err)
		}
		op := clients["team-a-ci/evalsi-operator"]
		for _, method := range []string{"GetRun", "CancelRun"} {
			if err := calls("team-a", runA)[method](ctx, op); code(err) != connect.CodeNotFound {
				t.Errorf("team-a-ci's operator: %s of team-a's run: %v, want NotFound", method, err)
			}
		}
		batch, err := op.runs.BatchGetRuns(ctx, connect.NewRequest(&v1.BatchGetRunsRequest{Project: "team-a", Ids: []string{runA}}))
		if err != nil || len(batch.Msg.Runs) != 0 {
			t.Errorf("team-a-ci's operator reading team-a's run in a batch: %v, %v; want it missing", batch, err)
		}
		for _, owner := range []string{"team-a/door", ""} {
			_, err := op.monitor.PutPolicy(ctx, connect.NewRequest(&v1.PutPolicyRequest{Project: "team-a", Name: "team-a-door", Owner: owner,
				Spec: &v1.PolicySpec{TraceSource: "prod", SamplingRate: 1}}))
			if code(err) != connect.CodePermissionDenied {
				t.Errorf("team-a-ci's operator putting team-a's policy as owner %q: %v, want PermissionDenied", owner, err)
			}
			_, err = op.monitor.DeletePolicy(ctx, connect.NewRequest(&v1.DeletePolicyRequest{Project: "team-a", Name: "team-a-door", Owner: owner}))
			if code(err) != connect.CodePermissionDenied {
				t.Errorf("team-a-ci's operator deleting team-a's policy as owner %q: %v, want PermissionDenied", owner, err)
			}
		}
		if got := srv.Policy("team-a-door"); got == nil || got.Spec.SamplingRate != 0.5 {
			t.Errorf("team-a's policy after team-a-ci's operator's calls: %v", got)
		}
		for _, r := range srv.Runs() {
			if r.Id == runA && r.Phase == v1.Phase_PHASE_CANCELLED {
				t.Errorf("team-a's run was cancelled by team-a-ci's operator")
			}
		}
	})

	t.Run("a bound namespace acts in its project only, and a new binding is read from the watch", func(t *testing.T) {
		op := clients["team-a-ci/evalsi-operator"]
		if _, err := op.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{Project: "team-a", IdempotencyKey: "ci-1", Spec: runSpec("")})); err != nil {
			t.Errorf("team-a-ci (bound to team-a) creating a run in team-a: %v", err)
		}
		_, err := op.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{Project: "team-a-ci", IdempotencyKey: "ci-2", Spec: runSpec("")}))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("team-a-ci creating a run in the project named like it: %v, want PermissionDenied", err)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"team-b"}}}`, evalsi.LabelProject)
		if _, err := cs.CoreV1().Namespaces().Patch(ctx, "team-a-ci", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		clustertest.Eventually(t, ctx, "team-a-ci acting in team-b, and no longer in team-a", func() error {
			if err := calls("team-a", runA)["GetRun"](ctx, op); connect.CodeOf(err) != connect.CodePermissionDenied {
				return fmt.Errorf("reading team-a's run: %v", err)
			}
			// It acts in team-b, on its own namespace's runs.
			_, err := op.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{Project: "team-b", IdempotencyKey: "ci-in-b", Spec: runSpec("")}))
			return err
		})
	})

	t.Run("a namespace named like a project whose namespaces are bound by label acts in none", func(t *testing.T) {
		_, err := clients["team-x/evalsi-operator"].runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
			Project: "team-x", IdempotencyKey: "squat-1", Spec: runSpec("")}))
		if code(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "acts in no project") {
			t.Errorf("the squatter's operator creating a run in project team-x: %v, want PermissionDenied saying it acts in no project", err)
		}
		if _, err := clients["team-x-prod/evalsi-operator"].runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
			Project: "team-x", IdempotencyKey: "prod-1", Spec: runSpec("")})); err != nil {
			t.Errorf("team-x-prod, bound to team-x, creating a run there: %v", err)
		}
	})

	t.Run("sandbox classes are checked at the server", func(t *testing.T) {
		for name, tc := range map[string]struct {
			ns, class string
			want      connect.Code
		}{
			"a namespace the class does not admit": {ns: "team-b", class: "privileged", want: connect.CodePermissionDenied},
			"a namespace the class admits":         {ns: "trusted", class: "privileged", want: 0},
			"a class that does not exist":          {ns: "trusted", class: "missing", want: connect.CodeFailedPrecondition},
		} {
			t.Run(name, func(t *testing.T) {
				// A namespaced operator's namespace is its own, whatever the request says.
				_, err := clients[tc.ns+"/evalsi-operator"].runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
					Project: tc.ns, IdempotencyKey: "class-" + tc.class, Namespace: "trusted", Spec: runSpec(tc.class)}))
				if code(err) != tc.want {
					t.Errorf("%v, want code %v", err, tc.want)
				}
			})
		}
	})

	t.Run("a pool hands trials only to the classes its namespace may use", func(t *testing.T) {
		// Each namespace's operator makes a run naming no class; its pool then hands a trial on
		// to the class its Evaluator names (EVALSI_SANDBOX_CLASS), which evalsid holds to the
		// class's allowedNamespaces whatever the pool says. A run naming a class keeps its
		// trials there.
		runOf := func(ns, project, class string) string {
			resp, err := clients[ns+"/evalsi-operator"].runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
				Project: project, IdempotencyKey: "trials-" + class, Spec: runSpec(class)}))
			if err != nil {
				t.Fatalf("%s's operator creating a run naming class %q: %v", ns, class, err)
			}
			return resp.Msg.Run.Id
		}
		depth := func() uint32 {
			d, err := clients["evalsi-sandbox/"+evalsi.QueueReaderServiceAccount].queues.GetQueueDepth(ctx,
				connect.NewRequest(&v1.GetQueueDepthRequest{Kind: v1.PoolKind_POOL_KIND_SANDBOX, Name: "privileged"}))
			if err != nil {
				t.Fatalf("the sandbox namespace's queue reader reading class privileged's queue: %v", err)
			}
			return d.Msg.GetDepth()
		}
		prod, trusted, trustedPinned := runOf("team-x-prod", "team-x", ""), runOf("trusted", "trusted", ""), runOf("trusted", "trusted", "open")
		before := depth()
		for name, tc := range map[string]struct {
			pool, project, run, class string
			want                      connect.Code
			wantClass                 string
		}{
			"a namespace the class does not admit": {pool: "team-x-prod", project: "team-x", run: prod, class: "privileged", want: connect.CodePermissionDenied},
			"a namespace the class admits":         {pool: "trusted", project: "trusted", run: trusted, class: "privileged", wantClass: "privileged"},
			"a class that does not exist":          {pool: "trusted", project: "trusted", run: trusted, class: "missing", want: connect.CodeFailedPrecondition},
			"no class for a run naming none":       {pool: "trusted", project: "trusted", run: trusted, want: connect.CodeInvalidArgument},
			"another class than the run's":         {pool: "trusted", project: "trusted", run: trustedPinned, class: "privileged", want: connect.CodeFailedPrecondition},
			"the run's class, named or not":        {pool: "trusted", project: "trusted", run: trustedPinned, wantClass: "open"},
			"a run of another project":             {pool: "team-x-prod", project: "trusted", run: trusted, class: "privileged", want: connect.CodePermissionDenied},
		} {
			t.Run(name, func(t *testing.T) {
				resp, err := clients[tc.pool+"/judge-evaluator"].queues.EnqueueTrial(ctx, connect.NewRequest(&v1.EnqueueTrialRequest{
					Project: tc.project, RunId: tc.run, SandboxClass: tc.class, Trial: name}))
				if code(err) != tc.want {
					t.Fatalf("%v, want code %v", err, tc.want)
				}
				if err == nil && resp.Msg.SandboxClass != tc.wantClass {
					t.Errorf("the trial waits for class %q, want %q", resp.Msg.SandboxClass, tc.wantClass)
				}
			})
		}
		// One trial was handed to class privileged, by the one pool its class admits.
		if got := depth(); got != before+1 {
			t.Errorf("class privileged's queue holds %d trials, want %d: only the admitted pool's trial waits", got, before+1)
		}
	})
}
