package workloads

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/evalsi"
	"evals.si/operator/isolation"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
)

// probedPod is a pool pod whose isolation probe ended with code and message (the probe's
// termination message), in its state or, waiting to run again, its last state.
func probedPod(name string, code int32, message string, last bool) corev1.Pod {
	ended := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: message}}
	s := corev1.ContainerStatus{Name: render.IsolationProbeContainer}
	if last {
		s.LastTerminationState = ended
		s.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	} else {
		s.State = ended
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{s}}}
}

// resultJSON is what a probe with this summary and missing list writes.
func resultJSON(summary string, missing ...string) string {
	b, _ := json.Marshal(isolation.Result{Summary: summary, Missing: missing})
	return string(b)
}

func TestWithIsolation(t *testing.T) {
	const summary = "landlock ABI 7; seccomp filter; no_new_privs; no capabilities; metadata unreachable"
	met := resultJSON(summary)
	noLandlock := resultJSON("no landlock; seccomp filter", "Landlock (landlock_create_ruleset: function not implemented)")
	rollingOut := engine.Ready(false, evalsi.ReasonRollingOut, "0 of 2 replicas run the current spec")
	for name, tc := range map[string]struct {
		pods      []corev1.Pod
		isolation any
		isolated  engine.Condition
		ready     engine.Condition
	}{
		"no probe ended yet": {
			pods:      []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}},
			isolation: nil,
			isolated:  engine.Condition{Type: evalsi.ConditionIsolated, Status: "Unknown", Reason: evalsi.ReasonProbing, Message: "no pod of the pool has finished its isolation probe"},
			ready:     rollingOut,
		},
		"every pod meets the floor": {
			pods:      []corev1.Pod{probedPod("b", 0, met, false), probedPod("a", 0, met, false)},
			isolation: summary + " on 2/2 pods",
			isolated:  engine.Condition{Type: evalsi.ConditionIsolated, Status: "True", Reason: evalsi.ReasonFloorMet, Message: "every probed pod meets the landlock floor"},
			ready:     rollingOut,
		},
		"a node without Landlock, its pod crash-looping": {
			pods:      []corev1.Pod{probedPod("a", 0, met, false), probedPod("b", 1, noLandlock, true)},
			isolation: summary + " on 1/2 pods",
			isolated: engine.Condition{Type: evalsi.ConditionIsolated, Status: "False", Reason: evalsi.ReasonFloorNotMet,
				Message: "1 of 2 pods miss the landlock floor: missing Landlock (landlock_create_ruleset: function not implemented)"},
			ready: engine.Ready(false, evalsi.ReasonFloorNotMet, "1 of 2 pods miss the landlock floor: missing Landlock (landlock_create_ruleset: function not implemented)"),
		},
		"a probe that passed and left no message": {
			pods:      []corev1.Pod{probedPod("a", 0, "", false)},
			isolation: "unknown on 1/1 pods",
			isolated:  engine.Condition{Type: evalsi.ConditionIsolated, Status: "True", Reason: evalsi.ReasonFloorMet, Message: "every probed pod meets the landlock floor"},
			ready:     rollingOut,
		},
		"an image without the probe": {
			pods:      []corev1.Pod{probedPod("a", 127, "exec: \"evalsi-operator\": executable file not found in $PATH", false)},
			isolation: "unknown on 0/1 pods",
			isolated: engine.Condition{Type: evalsi.ConditionIsolated, Status: "False", Reason: evalsi.ReasonFloorNotMet,
				Message: "the isolation probe of 1 of 1 pods ended without a result (exit code 127): the image must hold evalsi-operator (docs/image.md)"},
			ready: engine.Ready(false, evalsi.ReasonFloorNotMet, "the isolation probe of 1 of 1 pods ended without a result (exit code 127): the image must hold evalsi-operator (docs/image.md)"),
		},
	} {
		t.Run(name, func(t *testing.T) {
			st := &engine.Status{Fields: map[string]any{}, Conditions: []engine.Condition{rollingOut}}
			withIsolation(st, "landlock", probeOutcomes(tc.pods))
			want := &engine.Status{Fields: map[string]any{"isolation": tc.isolation}, Conditions: []engine.Condition{tc.ready, tc.isolated}}
			if diff := cmp.Diff(want, st); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}
