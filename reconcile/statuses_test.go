package reconcile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// These tables decide statuses from gathered inputs alone: they start no process.

// ready returns the Ready condition of st.
func ready(st *Status) Condition {
	for _, c := range st.Conditions {
		if c.Type == evalsi.ConditionReady {
			return c
		}
	}
	return Condition{}
}

func rolledOut(replicas int64) *cachedChild {
	return deploymentWith(1, &replicas, rolloutCounts{
		ObservedGeneration: 1, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas,
	})
}

func TestPoolStatus(t *testing.T) {
	for name, tc := range map[string]struct {
		pool        render.Pool
		sandbox     bool
		deploy      *cachedChild
		status      string
		reason      string
		autoscaling any
	}{
		"pod rung: no pool": {pool: render.Pool{Namespace: "evalsi-sandbox"}, sandbox: true,
			status: "True", reason: evalsi.ReasonNoPool},
		"Deployment not made yet": {pool: render.Pool{Deployment: "judge-evaluator", Replicas: 2},
			status: "False", reason: evalsi.ReasonRollingOut, autoscaling: "Fixed"},
		"rolled out, fixed replicas": {pool: render.Pool{Deployment: "judge-evaluator", Replicas: 2}, deploy: rolledOut(2),
			status: "True", reason: evalsi.ReasonAvailable, autoscaling: "Fixed"},
		"rolled out, scaled by KEDA": {pool: render.Pool{Deployment: "judge-evaluator", Autoscaled: true}, deploy: rolledOut(1),
			status: "True", reason: evalsi.ReasonAvailable, autoscaling: "KEDA"},
		"autoscaling asked for, KEDA missing": {pool: render.Pool{Deployment: "judge-evaluator", AutoscalingUnavailable: true, Replicas: 1},
			deploy: rolledOut(1), status: "True", reason: evalsi.ReasonAutoscalingUnavailable, autoscaling: "Unavailable"},
		"sandbox pool rolled out": {pool: render.Pool{Deployment: "sandbox-landlock", Namespace: "evalsi-sandbox", Replicas: 1},
			sandbox: true, deploy: rolledOut(1), status: "True", reason: evalsi.ReasonAvailable},
	} {
		t.Run(name, func(t *testing.T) {
			st := poolStatus(tc.pool, tc.sandbox, tc.deploy)
			if c := ready(st); c.Status != tc.status || c.Reason != tc.reason || c.Message == "" {
				t.Errorf("Ready = %+v, want %s/%s with a message", c, tc.status, tc.reason)
			}
			if got := st.Fields["autoscaling"]; got != tc.autoscaling {
				t.Errorf("autoscaling = %v, want %v", got, tc.autoscaling)
			}
			if _, set := st.Fields["namespace"]; set != tc.sandbox {
				t.Errorf("namespace field set = %v, want %v (sandbox pools only)", set, tc.sandbox)
			}
		})
	}
}

func TestCheckpointServerStatus(t *testing.T) {
	served := render.Served{Deployment: "m-vllm", Endpoint: "http://m-vllm.team-a.svc:8000/v1", ModelName: "m"}
	for name, tc := range map[string]struct {
		deploy *cachedChild
		status string
		reason string
	}{
		"not made yet":        {nil, "False", evalsi.ReasonRollingOut},
		"scaled to zero":      {rolledOut(0), "False", evalsi.ReasonNoReplicas},
		"a replica serves":    {rolledOut(1), "True", evalsi.ReasonServing},
		"old revision serves": {deploymentWith(2, new(int64(1)), rolloutCounts{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 0, ReadyReplicas: 1, AvailableReplicas: 1}), "False", evalsi.ReasonRollingOut},
	} {
		t.Run(name, func(t *testing.T) {
			st := checkpointServerStatus(served, tc.deploy)
			if c := ready(st); c.Status != tc.status || c.Reason != tc.reason {
				t.Errorf("Ready = %+v, want %s/%s", c, tc.status, tc.reason)
			}
			if st.Fields["endpoint"] != served.Endpoint || st.Fields["servedModelName"] != "m" {
				t.Errorf("fields %v lack the endpoint and model", st.Fields)
			}
		})
	}
}

func TestRunStatus(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	for name, tc := range map[string]struct {
		run                      *v1.Run
		phase                    string
		ready, complete, failed  string
		readyReason, failMessage string
	}{
		"unknown phase reads as Pending": {run: &v1.Run{Id: "r1"}, phase: evalsi.PhasePending,
			ready: "True", complete: "False", failed: "False", readyReason: evalsi.PhasePending},
		"running": {run: &v1.Run{Id: "r1", Phase: v1.Phase_PHASE_RUNNING, StartedAt: at}, phase: evalsi.PhaseRunning,
			ready: "True", complete: "False", failed: "False", readyReason: evalsi.PhaseRunning},
		"succeeded": {run: &v1.Run{Id: "r1", Phase: v1.Phase_PHASE_SUCCEEDED, StartedAt: at, CompletedAt: at, Summary: &v1.Summary{Total: 3, Passed: 2, Failed: 1, Score: 0.66}},
			phase: evalsi.PhaseSucceeded, ready: "True", complete: "True", failed: "False", readyReason: evalsi.PhaseSucceeded},
		"failed, with the server's message": {run: &v1.Run{Id: "r1", Phase: v1.Phase_PHASE_FAILED, Message: "suite crashed"},
			phase: evalsi.PhaseFailed, ready: "False", complete: "False", failed: "True", readyReason: evalsi.PhaseFailed, failMessage: "suite crashed"},
		"cancelled": {run: &v1.Run{Id: "r1", Phase: v1.Phase_PHASE_CANCELLED}, phase: evalsi.PhaseCancelled,
			ready: "False", complete: "False", failed: "True", readyReason: evalsi.PhaseCancelled, failMessage: "results so far are kept"},
	} {
		t.Run(name, func(t *testing.T) {
			st := runStatus(tc.run)
			if st.Fields["phase"] != tc.phase {
				t.Errorf("phase %v, want %s", st.Fields["phase"], tc.phase)
			}
			want := map[string]string{evalsi.ConditionReady: tc.ready, evalsi.ConditionComplete: tc.complete, evalsi.ConditionFailed: tc.failed}
			for _, c := range st.Conditions {
				if c.Status != want[c.Type] {
					t.Errorf("%s = %s, want %s", c.Type, c.Status, want[c.Type])
				}
				if c.Type == evalsi.ConditionFailed && c.Status == "True" && !strings.Contains(c.Message, tc.failMessage) {
					t.Errorf("Failed message %q lacks %q", c.Message, tc.failMessage)
				}
			}
			if len(st.Conditions) != 3 {
				t.Errorf("%d conditions, want Ready, Complete and Failed", len(st.Conditions))
			}
			if r := ready(st).Reason; r != tc.readyReason {
				t.Errorf("Ready reason %s, want %s", r, tc.readyReason)
			}
			if tc.run.Summary != nil && st.Fields["summary"] == nil {
				t.Error("no summary")
			}
			if tc.run.CompletedAt != nil && st.Fields["completedAt"] != "2026-11-30T12:00:00Z" {
				t.Errorf("completedAt %v", st.Fields["completedAt"])
			}
		})
	}
}

func TestAppliedStatus(t *testing.T) {
	st := appliedStatus("trace source", "team-a", map[string]any{"ingestEndpoint": "https://ingest.example/team-a"})
	if c := ready(st); c.Status != "True" || c.Reason != evalsi.ReasonApplied || !strings.Contains(c.Message, "team-a") {
		t.Errorf("Ready = %+v", c)
	}
	if st.Fields["project"] != "team-a" || st.Fields["ingestEndpoint"] == nil {
		t.Errorf("fields %v", st.Fields)
	}
}

func TestClassRefusal(t *testing.T) {
	class := func(selector map[string]any) *unstructured.Unstructured {
		spec := map[string]any{"rung": "bubblewrap", "replicas": int64(1)}
		if selector != nil {
			spec["allowedNamespaces"] = selector
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass", "metadata": map[string]any{"name": "bwrap"}, "spec": spec,
		}}
	}
	allowed := map[string]any{"matchLabels": map[string]any{"sandbox.evals.si/bubblewrap": "allowed"}}
	gr := schema.GroupResource{Group: evalsi.Group, Resource: "sandboxclasses"}
	for name, tc := range map[string]struct {
		class  *unstructured.Unstructured
		err    error
		labels map[string]string
		reason string // "" when the namespace may use the class
	}{
		"no allowedNamespaces: every namespace": {class: class(nil)},
		"selected by its label":                 {class: class(allowed), labels: map[string]string{"sandbox.evals.si/bubblewrap": "allowed"}},
		"not selected":                          {class: class(allowed), labels: map[string]string{"team": "b"}, reason: evalsi.ReasonClassNotAllowed},
		"not selected, no labels":               {class: class(allowed), reason: evalsi.ReasonClassNotAllowed},
		"missing class":                         {err: apierrors.NewNotFound(gr, "bwrap"), reason: evalsi.ReasonClassNotFound},
		"cannot be read: fails closed":          {err: apierrors.NewForbidden(gr, "bwrap", errors.New("no")), reason: evalsi.ReasonClassNotAllowed},
	} {
		t.Run(name, func(t *testing.T) {
			c := classRefusal("team-b", "bwrap", tc.class, tc.err, tc.labels)
			switch {
			case tc.reason == "" && c != nil:
				t.Errorf("refused: %+v", *c)
			case tc.reason != "" && (c == nil || c.Reason != tc.reason || c.Status != "False"):
				t.Errorf("got %+v, want Ready=False %s", c, tc.reason)
			}
		})
	}
}

func TestAccountRefusal(t *testing.T) {
	account := func(labels map[string]string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "judge", Namespace: "team-b", Labels: labels}}
	}
	gr := schema.GroupResource{Resource: "serviceaccounts"}
	for name, tc := range map[string]struct {
		sa      *corev1.ServiceAccount
		err     error
		refused string // "" when pools may run as the account
	}{
		"opened to pools":              {sa: account(map[string]string{evalsi.LabelPoolServiceAccount: "true"})},
		"not labelled":                 {sa: account(nil), refused: "is not open to pools"},
		"labelled with another value":  {sa: account(map[string]string{evalsi.LabelPoolServiceAccount: "yes"}), refused: "is not open to pools"},
		"missing":                      {err: apierrors.NewNotFound(gr, "judge"), refused: "does not exist"},
		"cannot be read: fails closed": {err: apierrors.NewForbidden(gr, "judge", errors.New("no")), refused: "cannot read service account judge"},
	} {
		t.Run(name, func(t *testing.T) {
			c := accountRefusal("team-b", "judge", tc.sa, tc.err)
			switch {
			case tc.refused == "" && c != nil:
				t.Errorf("refused: %+v", *c)
			case tc.refused != "" && (c == nil || c.Reason != evalsi.ReasonServiceAccountNotAllowed || c.Status != "False" || !strings.Contains(c.Message, tc.refused)):
				t.Errorf("got %+v, want Ready=False %s with %q", c, evalsi.ReasonServiceAccountNotAllowed, tc.refused)
			}
		})
	}
}

func TestAPIFailure(t *testing.T) {
	for name, tc := range map[string]struct {
		code     connect.Code
		reason   string
		terminal bool
	}{
		"invalid argument":    {connect.CodeInvalidArgument, evalsi.ReasonRejected, true},
		"failed precondition": {connect.CodeFailedPrecondition, evalsi.ReasonRejected, true},
		"unavailable":         {connect.CodeUnavailable, evalsi.ReasonAPIUnavailable, false},
		"deadline exceeded":   {connect.CodeDeadlineExceeded, evalsi.ReasonAPIUnavailable, false},
		"resource exhausted":  {connect.CodeResourceExhausted, evalsi.ReasonAPIUnavailable, false},
		"unauthenticated":     {connect.CodeUnauthenticated, evalsi.ReasonUnauthenticated, false},
		"permission denied":   {connect.CodePermissionDenied, evalsi.ReasonPermissionDenied, false},
		"internal":            {connect.CodeInternal, evalsi.ReasonAPIError, false},
	} {
		t.Run(name, func(t *testing.T) {
			cond, err := apiFailure("creating the run", connect.NewError(tc.code, errors.New("because")))
			if cond.Reason != tc.reason || cond.Status != "False" || !strings.Contains(cond.Message, "creating the run") {
				t.Errorf("condition %+v, want Ready=False %s naming what failed", cond, tc.reason)
			}
			if isTerminal(err) != tc.terminal {
				t.Errorf("terminal = %v, want %v", isTerminal(err), tc.terminal)
			}
		})
	}
}

// TestBuildStatusKeepsTransitionTimes decides lastTransitionTime with the clock stubbed: it is
// now() for a new condition or one whose status flipped, and kept when only the reason or the
// message changed, so that conditions do not flap.
func TestBuildStatusKeepsTransitionTimes(t *testing.T) {
	earlier := "2026-11-30T10:00:00Z"
	prev := now
	t.Cleanup(func() { now = prev })
	now = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }
	const later = "2026-11-30T12:00:00Z"
	old := map[string]any{"conditions": []any{map[string]any{
		"type": evalsi.ConditionReady, "status": "False", "reason": evalsi.ReasonRollingOut, "message": "0 of 1", "lastTransitionTime": earlier,
	}}}
	for name, tc := range map[string]struct {
		old  map[string]any
		next Condition
		want string
	}{
		"a new condition":              {nil, Ready(true, evalsi.ReasonAvailable, "rolled out"), later},
		"status flipped":               {old, Ready(true, evalsi.ReasonAvailable, "rolled out"), later},
		"same status, another reason":  {old, Ready(false, evalsi.ReasonInvalidSpec, "refused"), earlier},
		"same status, another message": {old, Ready(false, evalsi.ReasonRollingOut, "0 of 2"), earlier},
		"unchanged":                    {old, Ready(false, evalsi.ReasonRollingOut, "0 of 1"), earlier},
	} {
		t.Run(name, func(t *testing.T) {
			st := buildStatus(tc.old, &Status{Conditions: []Condition{tc.next}}, 7)
			c := st["conditions"].([]any)[0].(map[string]any)
			if c["lastTransitionTime"] != tc.want {
				t.Errorf("lastTransitionTime %v, want %s", c["lastTransitionTime"], tc.want)
			}
			if st["observedGeneration"] != int64(7) || c["observedGeneration"] != int64(7) {
				t.Errorf("observedGeneration %v / %v, want 7", st["observedGeneration"], c["observedGeneration"])
			}
		})
	}
}

// TestBuildStatusOverriddenReadyDoesNotFlip: a terminal error's Ready overrides the reconcile's
// Ready=True; when the object was already False, its transition time stays.
func TestBuildStatusOverriddenReadyDoesNotFlip(t *testing.T) {
	prev := now
	t.Cleanup(func() { now = prev })
	now = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }
	old := map[string]any{"conditions": []any{map[string]any{
		"type": evalsi.ConditionReady, "status": "False", "reason": evalsi.ReasonInvalidSpec, "message": "m",
		"observedGeneration": int64(1), "lastTransitionTime": "2026-11-30T10:00:00Z",
	}}}
	st := buildStatus(old, &Status{Conditions: []Condition{
		Ready(true, evalsi.ReasonAvailable, "fine"), Ready(false, evalsi.ReasonInvalidSpec, "m"),
	}}, 1)
	if !sameJSON(old["conditions"], st["conditions"]) {
		t.Errorf("conditions changed: %v, want %v", st["conditions"], old["conditions"])
	}
}
