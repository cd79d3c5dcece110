package runs

import (
	"time"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
)

// phaseNames are the status phases of the server's run phases.
var phaseNames = map[v1.Phase]string{
	v1.Phase_PHASE_PENDING:   evalsi.PhasePending,
	v1.Phase_PHASE_RUNNING:   evalsi.PhaseRunning,
	v1.Phase_PHASE_SUCCEEDED: evalsi.PhaseSucceeded,
	v1.Phase_PHASE_FAILED:    evalsi.PhaseFailed,
	v1.Phase_PHASE_CANCELLED: evalsi.PhaseCancelled,
}

// simulatedNote ends every condition message of a run whose results evalsid made up (the
// reference evalsid's), so that no reader takes them for results.
const simulatedNote = " (simulated: the reference evalsid ran no evaluator, its results are made up)"

// runStatus is the status of an EvalRun that follows run.
func runStatus(run *v1.Run) *engine.Status {
	phase := phaseNames[run.Phase]
	if phase == "" {
		phase = evalsi.PhasePending
	}
	fields := map[string]any{"runId": run.Id, "url": run.Url, "phase": phase, "startedAt": nil, "completedAt": nil, "summary": nil, "simulated": nil}
	if run.Simulated {
		fields["simulated"] = true
	}
	if t := run.StartedAt; t != nil {
		fields["startedAt"] = t.AsTime().UTC().Format(time.RFC3339)
	}
	if t := run.CompletedAt; t != nil {
		fields["completedAt"] = t.AsTime().UTC().Format(time.RFC3339)
	}
	if s := run.Summary; s != nil {
		fields["summary"] = map[string]any{
			"total": s.Total, "passed": s.Passed, "failed": s.Failed, "errored": s.Errored, "score": s.Score,
		}
	}
	// Ready says the run exists and is followed; Complete and Failed say how it ended, as a Job's
	// do, so that `kubectl wait --for=condition=Complete` blocks until the run succeeds.
	ready := engine.Ready(true, phase, "run "+run.Id+" is "+phase)
	complete := engine.Condition{Type: evalsi.ConditionComplete, Status: "False", Reason: phase, Message: "run " + run.Id + " has not succeeded"}
	failed := engine.Condition{Type: evalsi.ConditionFailed, Status: "False", Reason: phase, Message: "run " + run.Id + " has not failed"}
	switch phase {
	case evalsi.PhaseSucceeded:
		complete = engine.Condition{Type: evalsi.ConditionComplete, Status: "True", Reason: phase, Message: "run " + run.Id + " succeeded"}
	case evalsi.PhaseFailed:
		msg := "the run failed"
		if run.Message != "" {
			msg = run.Message
		}
		ready = engine.Ready(false, evalsi.PhaseFailed, msg)
		failed = engine.Condition{Type: evalsi.ConditionFailed, Status: "True", Reason: evalsi.PhaseFailed, Message: msg}
	case evalsi.PhaseCancelled:
		msg := "the run was cancelled; its results so far are kept"
		ready = engine.Ready(false, evalsi.PhaseCancelled, msg)
		failed = engine.Condition{Type: evalsi.ConditionFailed, Status: "True", Reason: evalsi.PhaseCancelled, Message: msg}
	}
	conds := []engine.Condition{ready, complete, failed}
	if run.Simulated {
		for i := range conds {
			conds[i].Message += simulatedNote
		}
	}
	return &engine.Status{Fields: fields, Conditions: conds}
}
