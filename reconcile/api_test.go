package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/apiclient"
	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
	"evals.si/operator/evalsid/evalsidtest"
)

// testEvalsid is the reference server on loopback with the operator's token in a file.
type testEvalsid struct {
	*evalsid.Server
	*evalsidtest.Faults
	URL, TokenFile string
}

func startEvalsid(t testing.TB, schedule evalsid.Schedule) testEvalsid {
	t.Helper()
	srv := evalsid.New(map[string]string{"operator-token-1": "system:serviceaccount:evalsi:evalsi-operator"}, schedule)
	// The engines of these tests act in the projects of many namespaces, as a cluster-wide
	// operator does.
	srv.TrustPlatform("system:serviceaccount:evalsi:evalsi-operator")
	faults := evalsidtest.Inject(srv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ctx, l)
	}()
	t.Cleanup(func() { cancel(); clustertest.Await(t, "evalsid", done) })
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("operator-token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return testEvalsid{Server: srv, Faults: faults, URL: "http://" + l.Addr().String(), TokenFile: token}
}

// apiConfig is an engine configuration against the test server.
func (s testEvalsid) apiConfig(ns string) Config {
	return Config{
		Namespace:       ns,
		API:             apiclient.Options{URL: s.URL, TokenFile: s.TokenFile, CallTimeout: 2 * time.Second},
		RunPollInterval: 300 * time.Millisecond,
		Controllers:     []string{"evalrun", "onlineevalpolicy", "tracesource"},
	}
}

// createRunningEvalRuns creates n EvalRuns (run-00, run-01, ...) in ns, moves each one's run to
// Running at api once it has one, waits until every EvalRun says Running, and returns them as
// they were while Pending (with their runId).
func createRunningEvalRuns(t *testing.T, ctx context.Context, api testEvalsid, ns string, n int) []*unstructured.Unstructured {
	t.Helper()
	for i := range n {
		create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", fmt.Sprintf("run-%02d", i), runSpec(nil))
	}
	var out []*unstructured.Unstructured
	for i := range n {
		got := waitPhase(t, ctx, ns, fmt.Sprintf("run-%02d", i), "Pending")
		id, _, _ := unstructured.NestedString(got.Object, "status", "runId")
		if err := api.SetPhase(id, v1.Phase_PHASE_RUNNING); err != nil {
			t.Fatal(err)
		}
		out = append(out, got)
	}
	for i := range n {
		waitPhase(t, ctx, ns, fmt.Sprintf("run-%02d", i), "Running")
	}
	return out
}

func runSpec(extra map[string]any) map[string]any {
	spec := map[string]any{
		"suite":  "smoke",
		"target": map[string]any{"endpoint": map[string]any{"url": "http://model:8000/v1", "model": "m"}},
		"trials": int64(2),
	}
	for k, v := range extra {
		spec[k] = v
	}
	return spec
}

func phaseOf(obj *unstructured.Unstructured) string {
	p, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	return p
}

func waitPhase(t testing.TB, ctx context.Context, ns, name, phase string) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	clustertest.Eventually(t, ctx, "phase "+phase, func() error {
		got = getObj(t, ctx, evalsi.EvalRuns, ns, name)
		if p := phaseOf(got); p != phase {
			return fmt.Errorf("phase %q", p)
		}
		return nil
	})
	return got
}

func TestEvalRunFollowsTheServerThenStopsPolling(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{Summary: evalsid.Summary{Total: 10, Passed: 9, Failed: 1, Score: 0.9}})
	startEngine(t, api.apiConfig(ns))
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "smoke", runSpec(nil))

	got := waitPhase(t, ctx, ns, "smoke", "Pending")
	id, _, _ := unstructured.NestedString(got.Object, "status", "runId")
	if err := api.SetPhase(id, v1.Phase_PHASE_RUNNING); err != nil {
		t.Fatal(err)
	}
	got = waitPhase(t, ctx, ns, "smoke", "Running")
	for cond, want := range map[string]string{"Ready": "True", "Complete": "False", "Failed": "False"} {
		if s, _, _ := conditionOf(got, cond); s != want {
			t.Errorf("while Running: %s=%s, want %s", cond, s, want)
		}
	}
	if err := api.SetPhase(id, v1.Phase_PHASE_SUCCEEDED); err != nil {
		t.Fatal(err)
	}
	got = waitPhase(t, ctx, ns, "smoke", "Succeeded")
	for cond, want := range map[string]string{"Ready": "True", "Complete": "True", "Failed": "False"} {
		if s, _, _ := conditionOf(got, cond); s != want {
			t.Errorf("once Succeeded: %s=%s, want %s", cond, s, want)
		}
	}
	clustertest.Eventually(t, ctx, "a Created event", func() error {
		events, err := env.Clientset().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Created"})
		if err != nil || len(events.Items) == 0 {
			return fmt.Errorf("none (%v)", err)
		}
		return nil
	})
	if total, _, _ := unstructured.NestedInt64(got.Object, "status", "summary", "total"); total != 10 {
		t.Errorf("summary total %d, want 10: %v", total, got.Object["status"])
	}
	if score, _, _ := unstructured.NestedFloat64(got.Object, "status", "summary", "score"); score != 0.9 {
		t.Errorf("summary score %v, want 0.9", score)
	}
	for _, f := range []string{"url", "startedAt", "completedAt"} {
		if v, _, _ := unstructured.NestedString(got.Object, "status", f); v == "" {
			t.Errorf("status.%s is empty", f)
		}
	}
	// The reference evalsid made the result up, and the status says so where a reader looks.
	if sim, _, _ := unstructured.NestedBool(got.Object, "status", "simulated"); !sim {
		t.Errorf("status.simulated is not true: %v", got.Object["status"])
	}
	if _, _, msg := conditionOf(got, "Complete"); !strings.Contains(msg, "simulated") {
		t.Errorf("Complete message %q does not say the result is simulated", msg)
	}
	if n := len(api.Runs()); n != 1 {
		t.Errorf("%d runs on the server, want 1", n)
	}
	if c := api.Runs()[0].Creator; c != "system:serviceaccount:evalsi:evalsi-operator" {
		t.Errorf("creator %q: without the created-by annotation the server records the caller", c)
	}
	before := api.Calls("GetRun")
	time.Sleep(3 * 300 * time.Millisecond * 6 / 5)
	if n := api.Calls("GetRun") - before; n != 0 {
		t.Errorf("%d GetRun calls after the run ended, want 0", n)
	}
}

// Running EvalRuns are read together, a BatchGetRuns call per poll interval instead of a GetRun
// per run and interval; when the batches fail, each EvalRun still follows its run on its own.
func TestRunningEvalRunsAreReadInBatches(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{}) // runs stay Pending until SetPhase moves them
	cfg := api.apiConfig(ns)
	e := startEngine(t, cfg)
	const n = 20
	var ids []string
	for _, r := range createRunningEvalRuns(t, ctx, api, ns, n) {
		id, _, _ := unstructured.NestedString(r.Object, "status", "runId")
		ids = append(ids, id)
	}

	reconciles := func() float64 {
		return e.Metrics().ReconcileCount("evalrun", "success") + e.Metrics().ReconcileCount("evalrun", "requeue")
	}
	gets, batches, before := api.Calls("GetRun"), api.Calls("BatchGetRuns"), reconciles()
	const intervals = 10
	time.Sleep(intervals * cfg.RunPollInterval)
	gets, batches = api.Calls("GetRun")-gets, api.Calls("BatchGetRuns")-batches
	// One by one, the runs would have been read n*intervals (200) times, and at each EvalRun's
	// fallback alone (every three intervals) about 67. A batch is fresh for two intervals; on a
	// busy machine a sweep takes longer than its interval, and a fallback finds it stale now and
	// then (13 GetRun in a CI run beside the fuzzers): at most one read per EvalRun is "few".
	if gets > n || batches < intervals/2 || batches > intervals+1 {
		t.Errorf("over %d poll intervals: %d GetRun and %d BatchGetRuns calls, want few GetRun and about one batch per interval", intervals, gets, batches)
	}
	// Unchanged runs queue nothing: each EvalRun comes back only at its fallback (every three
	// intervals, about 67 reconciles), not at every sweep (200).
	if r := reconciles() - before; r > n*intervals/2 {
		t.Errorf("%.0f reconciles of unchanged running EvalRuns over %d poll intervals, want at most %d", r, intervals, n*intervals/2)
	}

	// Batches refused: the run's end still arrives, read by the EvalRun's own fallback.
	api.Refuse("BatchGetRuns", connect.CodeUnavailable)
	gets = api.Calls("GetRun")
	if err := api.SetPhase(ids[0], v1.Phase_PHASE_SUCCEEDED); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ctx, ns, "run-00", "Succeeded")
	if api.Calls("GetRun") == gets {
		t.Error("the run's end arrived with no GetRun while batches were refused")
	}
}

func TestEvalRunSurvivesACrashBetweenCreateAndStatus(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig(ns)

	// The first operator dies right after CreateRun returns, before it writes the status: its
	// client's interceptor stops it and fails the call, as a crash would.
	crashed := make(chan struct{})
	var stopFirst func()
	var once sync.Once
	cfg.API.Interceptors = []connect.Interceptor{connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err != nil || !strings.HasSuffix(req.Spec().Procedure, "/CreateRun") {
				return resp, err
			}
			once.Do(func() { close(crashed); stopFirst() })
			return nil, errors.New("killed after CreateRun")
		}
	})}
	first := startEngineNoCleanup(t, cfg)
	stopFirst = first.stop
	cfg.API.Interceptors = nil
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "once", runSpec(map[string]any{"labels": map[string]any{"team": "a"}}))
	select {
	case <-crashed:
	case <-ctx.Done():
		t.Fatal("the first operator never created the run")
	}
	first.wait(t)
	if id, _, _ := unstructured.NestedString(getObj(t, ctx, evalsi.EvalRuns, ns, "once").Object, "status", "runId"); id != "" {
		t.Fatalf("status written before the crash: %s", id)
	}

	startEngine(t, cfg)
	got := waitPhase(t, ctx, ns, "once", "Pending")
	runs := api.Runs()
	if len(runs) != 1 {
		t.Fatalf("%d runs on the server for one EvalRun, want 1", len(runs))
	}
	if id, _, _ := unstructured.NestedString(got.Object, "status", "runId"); id != runs[0].Id {
		t.Errorf("status.runId %s, server run %s", id, runs[0].Id)
	}
	if api.Calls("CreateRun") != 2 {
		t.Errorf("CreateRun called %d times, want 2 (once per operator)", api.Calls("CreateRun"))
	}
}

func TestDeletingARunningEvalRunCancelsItOnce(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	startEngine(t, api.apiConfig(ns))
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "a", runSpec(nil))
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "b", runSpec(nil))
	for _, n := range []string{"a", "b"} {
		got := waitPhase(t, ctx, ns, n, "Pending")
		id, _, _ := unstructured.NestedString(got.Object, "status", "runId")
		api.SetPhase(id, v1.Phase_PHASE_RUNNING)
		waitPhase(t, ctx, ns, n, "Running")
	}

	// Server up: cancelled once, kept on the server, object gone.
	if err := client(evalsi.EvalRuns, ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, evalsi.EvalRuns, ns, "a")
	if n := api.Calls("CancelRun"); n != 1 {
		t.Errorf("CancelRun called %d times, want 1", n)
	}

	// Server down: the finalizer holds and the condition says why; back up, it completes.
	api.SetDown(true)
	if err := client(evalsi.EvalRuns, ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx, evalsi.EvalRuns, ns, "b", "False", "APIUnavailable")
	if got := getObj(t, ctx, evalsi.EvalRuns, ns, "b"); len(got.GetFinalizers()) == 0 {
		t.Fatal("finalizer released while the server could not cancel")
	}
	api.SetDown(false)
	waitGone(t, ctx, evalsi.EvalRuns, ns, "b")

	phases := map[v1.Phase]int{}
	for _, r := range api.Runs() {
		phases[r.Phase]++
	}
	if phases[v1.Phase_PHASE_CANCELLED] != 2 || len(api.Runs()) != 2 {
		t.Errorf("runs on the server by phase: %v, want both kept and Cancelled", phases)
	}
}

// TestAStatusNamingAnotherNamespacesRunReachesNothing: a namespace admin who may write EvalRun
// status (the evalsi-operator-evalrun role, bound to themselves) points an EvalRun's status.runId
// at another namespace's run of the same project, which a cluster-wide operator may read. It neither
// copies that run's status nor cancels it when the EvalRun is deleted: it cancels the run the
// EvalRun made, found by its own idempotency key.
func TestAStatusNamingAnotherNamespacesRunReachesNothing(t *testing.T) {
	ctx := testContext(t)
	victimNS, forgerNS := newNamespace(t, ctx, ""), newNamespace(t, ctx, "")
	// Two namespaces of one project (dev and prod of a team): the run is in the project both act in.
	for _, ns := range []string{victimNS, forgerNS} {
		mergePatch(t, ctx, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", ns,
			fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, evalsi.LabelProject, "shared-"+victimNS))
	}
	api := startEvalsid(t, evalsid.Schedule{})
	startEngine(t, api.apiConfig(victimNS))
	startEngine(t, api.apiConfig(forgerNS))
	create(t, ctx, evalsi.EvalRuns, victimNS, "EvalRun", "prod", runSpec(nil))
	victim, _, _ := unstructured.NestedString(waitPhase(t, ctx, victimNS, "prod", "Pending").Object, "status", "runId")
	if err := api.SetPhase(victim, v1.Phase_PHASE_RUNNING); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ctx, victimNS, "prod", "Running")
	create(t, ctx, evalsi.EvalRuns, forgerNS, "EvalRun", "forged", runSpec(nil))
	own, _, _ := unstructured.NestedString(waitPhase(t, ctx, forgerNS, "forged", "Pending").Object, "status", "runId")

	patch := fmt.Sprintf(`{"status":{"runId":%q}}`, victim)
	if _, err := client(evalsi.EvalRuns, forgerNS).Patch(ctx, "forged", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	got := waitReady(t, ctx, evalsi.EvalRuns, forgerNS, "forged", "False", evalsi.ReasonRunNotFound)
	if phase := phaseOf(got); phase == "Running" {
		t.Errorf("the forged EvalRun took the other namespace's run's phase %q", phase)
	}
	if err := client(evalsi.EvalRuns, forgerNS).Delete(ctx, "forged", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, evalsi.EvalRuns, forgerNS, "forged")
	for _, r := range api.Runs() {
		switch r.Id {
		case victim:
			if r.Phase != v1.Phase_PHASE_RUNNING {
				t.Errorf("the other namespace's run is %v after the forged EvalRun's deletion, want it Running", r.Phase)
			}
		case own:
			if r.Phase != v1.Phase_PHASE_CANCELLED {
				t.Errorf("the deleted EvalRun's own run is %v, want Cancelled", r.Phase)
			}
		}
	}
}

func waitGone(t *testing.T, ctx context.Context, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	clustertest.Eventually(t, ctx, name+" deleted", func() error {
		_, err := client(gvr, ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// TestEvalRunWaitsForItsCheckpointServer targets a CheckpointServer, without and with an API
// key: the run is created only once the server is Ready, with its endpoint and served model name
// and, for a keyed server, the name of the variable that holds the key (never the key).
func TestEvalRunWaitsForItsCheckpointServer(t *testing.T) {
	for name, tc := range map[string]struct {
		server map[string]any
		target map[string]any
		keyEnv string
	}{
		"unkeyed": {
			server: map[string]any{"model": "Qwen/Qwen2.5-0.5B", "servedModelName": "run1-step900"},
			target: map[string]any{"checkpointServer": "step-900"},
		},
		"keyed": {
			server: map[string]any{"model": "Qwen/Qwen2.5-0.5B", "servedModelName": "run1-step900",
				"apiKeySecret": map[string]any{"name": "vllm.keys", "key": "step-900"}},
			target: map[string]any{"checkpointServer": "step-900", "apiKeyEnv": "CKPT_API_KEY"},
			keyEnv: "CKPT_API_KEY",
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			ns := newNamespace(t, ctx, "")
			api := startEvalsid(t, evalsid.Schedule{})
			cfg := api.apiConfig(ns)
			cfg.Controllers = nil // the CheckpointServer controller too
			startEngine(t, cfg)
			create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "ckpt", map[string]any{"suite": "smoke", "target": tc.target})
			waitReady(t, ctx, evalsi.EvalRuns, ns, "ckpt", "False", "WaitingForTarget")
			if n := api.Calls("CreateRun"); n != 0 {
				t.Fatalf("CreateRun called %d times before the target was Ready", n)
			}
			create(t, ctx, evalsi.CheckpointServers, ns, "CheckpointServer", "step-900", tc.server)
			waitPhase(t, ctx, ns, "ckpt", "Pending")
			target := api.Runs()[0].Spec.Target
			want := "http://step-900-vllm." + ns + ".svc:8000/v1"
			if e := target.Endpoint; e.Url != want || e.Model != "run1-step900" || e.ApiKeyEnv != tc.keyEnv {
				t.Errorf("run target %s %s key in %q, want %s run1-step900 key in %q", e.Url, e.Model, e.ApiKeyEnv, want, tc.keyEnv)
			}
			if target.CheckpointServer != "step-900" {
				t.Errorf("run target names checkpoint server %q, want step-900", target.CheckpointServer)
			}
		})
	}
}

func TestInvalidArgumentIsTerminalAndUnavailableBacksOff(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig(ns)
	cfg.Resync = time.Second
	first := startEngine(t, cfg)

	api.KnownSuites("smoke")
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "unknown", runSpec(map[string]any{"suite": "nope"}))
	got := waitReady(t, ctx, evalsi.EvalRuns, ns, "unknown", "False", "Rejected")
	if _, _, msg := readyCondition(got); !strings.Contains(msg, `spec.suite: unknown suite "nope"`) {
		t.Errorf("message %q lacks the server's", msg)
	}
	if s, r, _ := conditionOf(got, "Stalled"); s != "True" || r != "Rejected" {
		t.Errorf("Stalled=%s reason %s, want True Rejected", s, r)
	}
	// Three more reconciles of the run (resyncs), counted rather than waited for, call nothing.
	calls, reconciles := api.Calls("CreateRun"), first.counter(t, "evalsi_reconcile_total", "evalrun")
	clustertest.Eventually(t, ctx, "three more reconciles of the rejected run", func() error {
		if n := first.counter(t, "evalsi_reconcile_total", "evalrun") - reconciles; n < 3 {
			return fmt.Errorf("%v reconciles", n)
		}
		return nil
	})
	if n := api.Calls("CreateRun") - calls; n != 0 {
		t.Errorf("%d more CreateRun calls over three reconciles after a terminal rejection", n)
	}

	// Backoff, on an engine of its own whose resync (the default, 10 minutes) cannot requeue the
	// object between retries.
	ns = newNamespace(t, ctx, "")
	second := startEngine(t, api.apiConfig(ns))
	start := len(api.CallLog())
	api.FailNext(8, connect.CodeUnavailable)
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "later", runSpec(nil))
	waitReady(t, ctx, evalsi.EvalRuns, ns, "later", "False", "APIUnavailable")
	waitPhase(t, ctx, ns, "later", "Pending")
	var at []time.Time
	for _, c := range api.CallLog()[start:] {
		if c.Method == "CreateRun" {
			at = append(at, c.At)
		}
	}
	if len(at) != 9 {
		t.Fatalf("%d CreateRun calls, want 8 failures and 1 success", len(at))
	}
	// Each failure went back through the queue's rate limiter (whose delay doubles per item),
	// counted by the queue, not timed: a fixed requeue would count none.
	if n := second.counter(t, "evalsi_workqueue_retries_total", "evalrun"); n < 8 {
		t.Errorf("%v rate-limited retries of the EvalRun queue, want at least the 8 failures", n)
	}
}

// TestTokenFileRotation rotates the operator's token as the kubelet does (a new file renamed over
// the old) while evalsid stops accepting the old token at once: the very next call the operator
// makes carries the new token, so no call after the rotation is refused (a token cached for a
// while, as client-go's cached token source does, would send the revoked one).
func TestTokenFileRotation(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	startEngine(t, api.apiConfig(ns))
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "first", runSpec(nil))
	first := waitPhase(t, ctx, ns, "first", "Pending")
	// The first run ends, so that no call is in flight when the token rotates.
	id, _, _ := unstructured.NestedString(first.Object, "status", "runId")
	if err := api.SetPhase(id, v1.Phase_PHASE_SUCCEEDED); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ctx, ns, "first", "Succeeded")

	api.SetToken("operator-token-2", "system:serviceaccount:evalsi:evalsi-operator")
	tmp := api.TokenFile + ".new"
	if err := os.WriteFile(tmp, []byte("operator-token-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, api.TokenFile); err != nil {
		t.Fatal(err)
	}
	api.RevokeToken("operator-token-1")
	rotated := len(api.CallLog())
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "second", runSpec(nil))
	waitPhase(t, ctx, ns, "second", "Pending")
	after := api.CallLog()[rotated:]
	if len(after) == 0 {
		t.Fatal("no call after the rotation")
	}
	for _, c := range after {
		if c.Code == connect.CodeUnauthenticated {
			t.Errorf("a %s call after the rotation was refused: the old token was sent", c.Method)
		}
	}
}

func TestPolicyConflictsAndDrift(t *testing.T) {
	ctx := testContext(t)
	teamA, teamB := newNamespace(t, ctx, ""), newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig("")
	cfg.Resync = time.Second
	e := startEngine(t, cfg)
	spec := map[string]any{"traceSource": "prod", "samplingRate": 0.1, "evaluators": []any{"toxicity"}, "enabled": true}
	create(t, ctx, evalsi.OnlineEvalPolicies, teamA, "OnlineEvalPolicy", "toxicity", spec)
	waitReady(t, ctx, evalsi.OnlineEvalPolicies, teamA, "toxicity", "True", "Applied")
	other := map[string]any{"traceSource": "staging", "samplingRate": 0.5, "evaluators": []any{"pii"}, "enabled": true}
	create(t, ctx, evalsi.OnlineEvalPolicies, teamB, "OnlineEvalPolicy", "toxicity", other)
	waitReady(t, ctx, evalsi.OnlineEvalPolicies, teamB, "toxicity", "False", "Conflict")
	if p := api.Policy("toxicity"); p.Project != teamA || p.Spec.TraceSource != "prod" {
		t.Errorf("team A's policy changed: %v", p)
	}

	// Deleting team B's object leaves team A's policy.
	if err := client(evalsi.OnlineEvalPolicies, teamB).Delete(ctx, "toxicity", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "team B's object gone", func() error {
		if _, err := client(evalsi.OnlineEvalPolicies, teamB).Get(ctx, "toxicity", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	if p := api.Policy("toxicity"); p == nil || p.Project != teamA {
		t.Fatal("deleting the conflicting object deleted the owner's policy")
	}

	// Unchanged: no Put over several resyncs.
	puts := api.Calls("PutPolicy")
	e.reconcilesAfter(t, ctx, 4, "onlineevalpolicy")() // two of each object
	if n := api.Calls("PutPolicy") - puts; n != 0 {
		t.Errorf("%d PutPolicy calls for an unchanged policy", n)
	}
	// Changed behind the operator's back: put back.
	api.SetPolicySpec("toxicity", &v1.PolicySpec{TraceSource: "prod", SamplingRate: 1})
	clustertest.Eventually(t, ctx, "policy put back", func() error {
		if p := api.Policy("toxicity"); p.Spec.SamplingRate != 0.1 {
			return fmt.Errorf("sampling rate %v", p.Spec.SamplingRate)
		}
		return nil
	})
	// Deleting team A's object deletes its policy.
	if err := client(evalsi.OnlineEvalPolicies, teamA).Delete(ctx, "toxicity", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "policy deleted on the server", func() error {
		if api.Policy("toxicity") != nil {
			return errors.New("still there")
		}
		return nil
	})
}

// TestOneProjectsObjectsHoldTheirOwnNames: two namespaces bound to one project each declare a
// policy and a trace source of the same names, with other specs. The first to declare holds each;
// the other is Conflict, naming the holder, and over several resyncs puts nothing over the
// holder's spec. Deleting it leaves the holder's on the server; deleting the holder deletes them.
func TestOneProjectsObjectsHoldTheirOwnNames(t *testing.T) {
	ctx := testContext(t)
	first, second := newNamespace(t, ctx, ""), newNamespace(t, ctx, "")
	project := "shared-" + first
	for _, ns := range []string{first, second} {
		mergePatch(t, ctx, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", ns,
			fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, evalsi.LabelProject, project))
	}
	api := startEvalsid(t, evalsid.Schedule{})
	cfg := api.apiConfig("")
	cfg.Resync = time.Second
	startEngine(t, cfg)

	for _, o := range []struct {
		gvr         schema.GroupVersionResource
		kind        string
		mine, other map[string]any
		// held is what the server holds of the name: its spec's distinguishing field, "" when none.
		held func() string
	}{
		{evalsi.OnlineEvalPolicies, "OnlineEvalPolicy",
			map[string]any{"traceSource": "prod", "samplingRate": 0.1, "evaluators": []any{"toxicity"}},
			map[string]any{"traceSource": "staging", "samplingRate": 0.5, "evaluators": []any{"pii"}},
			func() string { return api.Policy("shared").GetSpec().GetTraceSource() }},
		{evalsi.TraceSources, "TraceSource",
			map[string]any{"type": "otlp"},
			map[string]any{"type": "langfuse", "settings": map[string]any{"host": "https://langfuse.example"}},
			func() string { return api.TraceSource(project, "shared").GetSpec().GetType() }},
	} {
		t.Run(o.kind, func(t *testing.T) {
			create(t, ctx, o.gvr, first, o.kind, "shared", o.mine)
			waitReady(t, ctx, o.gvr, first, "shared", "True", "Applied")
			holder := o.held()
			create(t, ctx, o.gvr, second, o.kind, "shared", o.other)
			got := waitReady(t, ctx, o.gvr, second, "shared", "False", evalsi.ReasonConflict)
			if _, _, msg := readyCondition(got); !strings.Contains(msg, "held in project "+project+" by "+first+"/shared") {
				t.Errorf("Conflict message %q does not name the holder %s/shared", msg, first)
			}
			time.Sleep(2500 * time.Millisecond) // resyncs of both objects
			if h := o.held(); h != holder {
				t.Errorf("the server holds %q, want the first object's %q kept", h, holder)
			}
			waitReady(t, ctx, o.gvr, first, "shared", "True", "Applied")

			if err := client(o.gvr, second).Delete(ctx, "shared", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitGone(t, ctx, o.gvr, second, "shared")
			if h := o.held(); h != holder {
				t.Fatalf("deleting the second object left %q on the server, want the holder's %q", h, holder)
			}
			if err := client(o.gvr, first).Delete(ctx, "shared", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			clustertest.Eventually(t, ctx, "deleted on the server with its holder", func() error {
				if h := o.held(); h != "" {
					return fmt.Errorf("the server still holds %q", h)
				}
				return nil
			})
		})
	}
}

func TestTraceSourceReportsIngestEndpoint(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	startEngine(t, api.apiConfig(ns))
	create(t, ctx, evalsi.TraceSources, ns, "TraceSource", "prod", map[string]any{"type": "otlp"})
	got := waitReady(t, ctx, evalsi.TraceSources, ns, "prod", "True", "Applied")
	endpoint, _, _ := unstructured.NestedString(got.Object, "status", "ingestEndpoint")
	if !strings.Contains(endpoint, "/ingest/"+ns+"/prod/") {
		t.Errorf("status.ingestEndpoint = %q", endpoint)
	}

	// evalsid away: the status says so, and keeps the endpoint it reported.
	api.Refuse("GetTraceSource", connect.CodeUnavailable)
	mergePatch(t, ctx, evalsi.TraceSources, ns, "prod", `{"metadata":{"labels":{"nudge":"1"}}}`)
	got = waitReady(t, ctx, evalsi.TraceSources, ns, "prod", "False", evalsi.ReasonAPIUnavailable)
	if ep, _, _ := unstructured.NestedString(got.Object, "status", "ingestEndpoint"); ep != endpoint {
		t.Errorf("status.ingestEndpoint during the outage = %q, want %q kept", ep, endpoint)
	}
	oneOfEachType(t, got)
	api.Refuse("GetTraceSource", 0)
	got = waitReady(t, ctx, evalsi.TraceSources, ns, "prod", "True", evalsi.ReasonApplied)
	oneOfEachType(t, got)
}

// oneOfEachType fails when obj's status holds two conditions of one type.
func oneOfEachType(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	seen := map[any]bool{}
	for _, c := range conds {
		typ := c.(map[string]any)["type"]
		if seen[typ] {
			t.Errorf("two %v conditions: %v", typ, conds)
		}
		seen[typ] = true
	}
}

// TestAPIKindsSteadyStateWritesNothing brings an EvalRun to its end and an OnlineEvalPolicy and a
// TraceSource to Applied, then counts every write over three resyncs: none to the Kubernetes API
// (statuses, finalizers, events, of every kind) and none to evalsid (a policy or trace source is
// read and compared, never put again when it holds the spec; an ended run is not read at all).
func TestAPIKindsSteadyStateWritesNothing(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{Pending: 200 * time.Millisecond, Running: 200 * time.Millisecond})
	cfg := api.apiConfig(ns)
	cfg.Resync = time.Second
	e := startEngine(t, cfg)
	create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", "smoke", runSpec(nil))
	create(t, ctx, evalsi.OnlineEvalPolicies, ns, "OnlineEvalPolicy", "steady-"+ns,
		map[string]any{"traceSource": "prod", "samplingRate": 0.1, "evaluators": []any{"toxicity"}})
	create(t, ctx, evalsi.TraceSources, ns, "TraceSource", "prod", map[string]any{"type": "otlp"})
	waitPhase(t, ctx, ns, "smoke", evalsi.PhaseSucceeded)
	waitReady(t, ctx, evalsi.OnlineEvalPolicies, ns, "steady-"+ns, "True", evalsi.ReasonApplied)
	waitReady(t, ctx, evalsi.TraceSources, ns, "prod", "True", evalsi.ReasonApplied)
	settled(t, ctx, e.Engine)

	serverWrites := func() int {
		return api.Calls("CreateRun") + api.Calls("CancelRun") + api.Calls("PutPolicy") + api.Calls("DeletePolicy") +
			api.Calls("PutTraceSource") + api.Calls("DeleteTraceSource")
	}
	before, beforeServer, runReads := writes(e.Engine), serverWrites(), api.Calls("GetRun")
	e.reconcilesAfter(t, ctx, 3, "evalrun", "onlineevalpolicy", "tracesource")()
	if w := writes(e.Engine) - before; w != 0 {
		t.Errorf("%v Kubernetes writes over three resyncs at steady state, want 0", w)
	}
	if w := serverWrites() - beforeServer; w != 0 {
		t.Errorf("%d evalsid writes over three resyncs at steady state, want 0", w)
	}
	if r := api.Calls("GetRun") - runReads; r != 0 {
		t.Errorf("%d reads of an ended run, want 0", r)
	}
}

// TestKubectlWaitsForTheRunToEnd drives the real kubectl as a user does: `kubectl wait
// --for=condition=Complete` blocks while the run is Pending and Running and returns when the
// reference evalsid ends it; `--for=condition=Failed` does the same for a failed run.
func TestKubectlWaitsForTheRunToEnd(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{Summary: evalsid.Summary{Total: 1, Passed: 1, Score: 1}})
	startEngine(t, api.apiConfig(ns))
	for name, end := range map[string]struct {
		condition string
		phase     v1.Phase
	}{
		"ends-well": {"Complete", v1.Phase_PHASE_SUCCEEDED},
		"ends-bad":  {"Failed", v1.Phase_PHASE_FAILED},
	} {
		create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", name, runSpec(nil))
		got := waitPhase(t, ctx, ns, name, "Pending")
		id, _, _ := unstructured.NestedString(got.Object, "status", "runId")

		wait := exec.CommandContext(ctx, env.Kubectl, "--kubeconfig="+env.Kubeconfig, "-n", ns, "wait",
			"--for=condition="+end.condition, "evalrun/"+name, "--timeout=2m")
		var out bytes.Buffer
		wait.Stdout, wait.Stderr = &out, &out
		if err := wait.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- wait.Wait() }()

		if err := api.SetPhase(id, v1.Phase_PHASE_RUNNING); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, ctx, ns, name, "Running")
		select {
		case err := <-done:
			t.Fatalf("%s: kubectl wait returned while the run was Running: %v\n%s", name, err, out.String())
		case <-time.After(time.Second):
		}
		if err := api.SetPhase(id, end.phase); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: kubectl wait: %v\n%s", name, err, out.String())
			}
			if want := "evalrun.evals.si/" + name + " condition met"; !strings.Contains(out.String(), want) {
				t.Errorf("%s: kubectl wait printed %q, want %q", name, out.String(), want)
			}
		case <-ctx.Done():
			t.Fatalf("%s: kubectl wait did not return after the run ended", name)
		}
	}
}

// TestObjectsWaitingOnEvalsidRecoverAtOnce takes evalsid away while EvalRuns wait on it, then
// brings it back: the first call it answers (a waiting object retried as a canary every 2 s) puts
// every waiting object back on its queue at once, instead of each waiting out its own backoff.
// How soon that is after the return is a benchmark figure (BenchmarkRecoveryAfterEvalsidOutage);
// here the mechanism is checked: every object that waited is requeued by the answer, and all
// converge with one CreateRun each.
func TestObjectsWaitingOnEvalsidRecoverAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	needCluster(t)
	ns := newNamespace(t, ctx, "")
	api := startEvalsid(t, evalsid.Schedule{})
	api.SetDown(true)
	e := startEngine(t, api.apiConfig(ns))
	names := []string{"a", "b", "c", "d", "e", "f"}
	for _, n := range names {
		create(t, ctx, evalsi.EvalRuns, ns, "EvalRun", n, runSpec(nil))
	}
	// Every run has failed on evalsid and waits.
	clustertest.Eventually(t, ctx, "every run waiting on evalsid", func() error {
		for _, n := range names {
			if _, reason, _ := readyCondition(getObj(t, ctx, evalsi.EvalRuns, ns, n)); reason != evalsi.ReasonAPIUnavailable {
				return fmt.Errorf("%s: Ready reason %q", n, reason)
			}
		}
		return nil
	})
	api.SetDown(false)
	for _, n := range names {
		waitPhase(t, ctx, ns, n, "Pending")
	}
	// The canary's answer puts back the others (and itself, when it was still marked waiting).
	if r := e.Metrics().RequeuedOnAnswer(); r < float64(len(names)-1) {
		t.Errorf("%v objects requeued by evalsid's answer, want every waiting one (%d or more)", r, len(names)-1)
	}
	if n := api.Calls("CreateRun"); n != len(names) {
		t.Errorf("%d CreateRun calls answered, want %d (one per run)", n, len(names))
	}
}
