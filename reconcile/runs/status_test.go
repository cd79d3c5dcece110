package runs

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
)

// ready returns the Ready condition of st.
func ready(st *engine.Status) engine.Condition {
	for _, c := range st.Conditions {
		if c.Type == evalsi.ConditionReady {
			return c
		}
	}
	return engine.Condition{}
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
		"simulated": {run: &v1.Run{Id: "r1", Phase: v1.Phase_PHASE_SUCCEEDED, Simulated: true}, phase: evalsi.PhaseSucceeded,
			ready: "True", complete: "True", failed: "False", readyReason: evalsi.PhaseSucceeded},
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
			// A made-up result says so in the status and in every condition; a real one in none.
			if sim, _ := st.Fields["simulated"].(bool); sim != tc.run.Simulated {
				t.Errorf("simulated %v, want %v", st.Fields["simulated"], tc.run.Simulated)
			}
			for _, c := range st.Conditions {
				if strings.Contains(c.Message, "simulated") != tc.run.Simulated {
					t.Errorf("%s message %q: simulated run %v", c.Type, c.Message, tc.run.Simulated)
				}
			}
			if tc.run.CompletedAt != nil && st.Fields["completedAt"] != "2026-11-30T12:00:00Z" {
				t.Errorf("completedAt %v", st.Fields["completedAt"])
			}
		})
	}
}
