package engine

import (
	"errors"
	"testing"
	"time"

	"evals.si/operator/evalsi"
)

// TestBuildStatusKeepsTransitionTimes decides lastTransitionTime at a given time: it is
// the time given (at) for a new condition or one whose status flipped, and kept when only the reason or the
// message changed, so that conditions do not flap.
func TestBuildStatusKeepsTransitionTimes(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	earlier := "2026-11-30T10:00:00Z"
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
			st := mergeStatus(tc.old, &Status{Conditions: []Condition{tc.next}}, nil, 7, at)
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

// TestMergeStatusOverriddenReadyDoesNotFlip: a terminal error's Ready overrides the reconcile's
// Ready=True; when the object was already False, its transition time stays.
func TestMergeStatusOverriddenReadyDoesNotFlip(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := map[string]any{"refused": RefusedSpec, "conditions": []any{
		map[string]any{
			"type": evalsi.ConditionReady, "status": "False", "reason": evalsi.ReasonInvalidSpec, "message": "m",
			"observedGeneration": int64(1), "lastTransitionTime": "2026-11-30T10:00:00Z",
		},
		map[string]any{
			"type": evalsi.ConditionStalled, "status": "True", "reason": evalsi.ReasonInvalidSpec, "message": "m",
			"observedGeneration": int64(1), "lastTransitionTime": "2026-11-30T10:00:00Z",
		},
	}}
	st := mergeStatus(old, &Status{Conditions: []Condition{Ready(true, evalsi.ReasonAvailable, "fine")}},
		&TerminalError{Reason: evalsi.ReasonInvalidSpec, Err: errors.New("m")}, 1, at)
	if !SameJSON(old["conditions"], st["conditions"]) {
		t.Errorf("conditions changed: %v, want %v", st["conditions"], old["conditions"])
	}
}

// TestMergeStatus holds the status writer to merging by field and by condition type: a reconcile
// that reports less keeps the rest, a nil field removes it, a type is never held twice, and the
// engine alone sets and removes Stalled and the record of what was refused.
func TestMergeStatus(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := map[string]any{
		"project": "team-a", "ingestEndpoint": "https://ingest.example/team-a", "observedGeneration": int64(1),
		"conditions": []any{
			map[string]any{"type": evalsi.ConditionReady, "status": "True", "reason": evalsi.ReasonApplied, "message": "applied", "lastTransitionTime": "2026-11-30T10:00:00Z"},
			map[string]any{"type": evalsi.ConditionComplete, "status": "False", "reason": "Running", "message": "not yet", "lastTransitionTime": "2026-11-30T10:00:00Z"},
		},
	}
	conds := func(st map[string]any) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, c := range st["conditions"].([]any) {
			m := c.(map[string]any)
			if _, twice := out[m["type"].(string)]; twice {
				t.Errorf("condition %s held twice", m["type"])
			}
			out[m["type"].(string)] = m
		}
		return out
	}
	t.Run("an outage keeps what is known", func(t *testing.T) {
		st := mergeStatus(old, NotReady(evalsi.ReasonAPIUnavailable, "evalsid is away"), nil, 2, at)
		if st["ingestEndpoint"] != "https://ingest.example/team-a" || st["project"] != "team-a" {
			t.Errorf("fields %v, want the ingest endpoint and project kept", st)
		}
		c := conds(st)
		if c[evalsi.ConditionReady]["reason"] != evalsi.ReasonAPIUnavailable || c[evalsi.ConditionComplete] == nil {
			t.Errorf("conditions %v, want Ready APIUnavailable and Complete kept", c)
		}
	})
	t.Run("a nil field is removed", func(t *testing.T) {
		st := mergeStatus(old, &Status{Fields: map[string]any{"ingestEndpoint": nil}}, nil, 1, at)
		if _, set := st["ingestEndpoint"]; set {
			t.Errorf("ingestEndpoint kept: %v", st)
		}
	})
	t.Run("one condition of a type, the last given", func(t *testing.T) {
		st := mergeStatus(old, &Status{Conditions: []Condition{Ready(false, "A", "a"), Ready(true, "B", "b")}}, nil, 1, at)
		if r := conds(st)[evalsi.ConditionReady]; r["reason"] != "B" {
			t.Errorf("Ready %v, want the last given", r)
		}
	})
	t.Run("a terminal error stalls and records its refusal; another outcome clears both", func(t *testing.T) {
		st := mergeStatus(old, nil, &TerminalError{Reason: evalsi.ReasonInvalidSpec, Err: errors.New("bad"), Refused: "Deployment d rendering 1"}, 2, at)
		c := conds(st)
		if c[evalsi.ConditionStalled]["status"] != "True" || c[evalsi.ConditionReady]["reason"] != evalsi.ReasonInvalidSpec || st[refusedField] != "Deployment d rendering 1" {
			t.Fatalf("status %v, want Stalled, Ready InvalidSpec and the refusal recorded", st)
		}
		cleared := mergeStatus(st, &Status{Conditions: []Condition{Ready(true, evalsi.ReasonAvailable, "ok")}}, nil, 3, at)
		if _, stalled := conds(cleared)[evalsi.ConditionStalled]; stalled || cleared[refusedField] != nil {
			t.Errorf("status %v, want Stalled and the refusal gone", cleared)
		}
	})
}
