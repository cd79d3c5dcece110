package workloads

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"evals.si/operator/evalsi"
	"evals.si/operator/isolation"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
)

// probeOutcome is what the isolation probe of one pool pod said, once it ended.
type probeOutcome struct {
	pod      string
	exitCode int32
	// result is the probe's termination message, nil when it left none that parses (an image
	// without evalsi-operator, a probe killed before it wrote).
	result *isolation.Result
}

// probeOutcomes reads the ended isolation probes of pods, by pod name: the init container's
// state, or its last state while it waits to be run again.
func probeOutcomes(pods []corev1.Pod) []probeOutcome {
	var out []probeOutcome
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name != render.IsolationProbeContainer {
				continue
			}
			ended := s.State.Terminated
			if ended == nil {
				ended = s.LastTerminationState.Terminated
			}
			if ended == nil {
				continue
			}
			o := probeOutcome{pod: p.Name, exitCode: ended.ExitCode}
			var r isolation.Result
			if json.Unmarshal([]byte(ended.Message), &r) == nil && r.Summary != "" {
				o.result = &r
			}
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b probeOutcome) int { return strings.Compare(a.pod, b.pod) })
	return out
}

// withIsolation adds to a SandboxClass's status what its pool's probes found: status.isolation
// (the summary of a pod that met the floor, else of the first, "on k/n pods" that met it) and the
// Isolated condition; when a pod's probe failed, Ready turns False with what is missing, which
// says more than a rollout that does not advance. No message names a pod: a ReplicaSet draws new
// pod names at every retry, and the status would change with them.
func withIsolation(st *engine.Status, rung string, probes []probeOutcome) {
	if len(probes) == 0 {
		st.Fields["isolation"] = nil
		st.Conditions = append(st.Conditions, engine.Condition{Type: evalsi.ConditionIsolated, Status: "Unknown",
			Reason: evalsi.ReasonProbing, Message: "no pod of the pool has finished its isolation probe"})
		return
	}
	var met int
	var summary string
	var failed []probeOutcome
	for _, p := range probes {
		// The probe's exit code is the gate (it exits 0 only when the floor is met); a message
		// is what it found, and a kubelet may have dropped it.
		if p.exitCode == 0 && (p.result == nil || len(p.result.Missing) == 0) {
			met++
			if summary == "" && p.result != nil {
				summary = p.result.Summary
			}
			continue
		}
		failed = append(failed, p)
	}
	if summary == "" && probes[0].result != nil {
		summary = probes[0].result.Summary
	}
	if summary == "" {
		summary = "unknown"
	}
	st.Fields["isolation"] = fmt.Sprintf("%s on %d/%d pods", summary, met, len(probes))
	if len(failed) == 0 {
		st.Conditions = append(st.Conditions, engine.Condition{Type: evalsi.ConditionIsolated, Status: "True",
			Reason: evalsi.ReasonFloorMet, Message: fmt.Sprintf("every probed pod meets the %s floor", rung)})
		return
	}
	why := fmt.Sprintf("the isolation probe of %d of %d pods ended without a result (exit code %d): the image must hold evalsi-operator (docs/image.md)",
		len(failed), len(probes), failed[0].exitCode)
	if r := failed[0].result; r != nil {
		why = fmt.Sprintf("%d of %d pods miss the %s floor: missing %s", len(failed), len(probes), rung, strings.Join(r.Missing, ", "))
	}
	st.Conditions = append(st.Conditions, engine.Condition{Type: evalsi.ConditionIsolated, Status: "False",
		Reason: evalsi.ReasonFloorNotMet, Message: why})
	for i, c := range st.Conditions {
		if c.Type == evalsi.ConditionReady {
			st.Conditions[i] = engine.Ready(false, evalsi.ReasonFloorNotMet, why)
		}
	}
}
