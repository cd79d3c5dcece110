package engine

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine/cached"
	"evals.si/operator/unstructuredjson"
)

// refusedField is the status field that says what was refused for observedGeneration (a
// TerminalError's Refused), beside the Stalled condition: the engine's one memory of a refusal.
const refusedField = "refused"

// writeStatus merges st, and the terminal error te when there is one, into obj's status and
// writes the result when it differs from what obj holds; it records an Event when the Ready
// condition changed. It returns the object written as the cache keeps it, or nil when nothing
// was: nothing is written at steady state.
func (s *services) writeStatus(ctx context.Context, resource schema.GroupVersionResource, obj *unstructured.Unstructured, st *Status, te *TerminalError) (*cached.Owner, error) {
	old, _, _ := unstructured.NestedMap(obj.Object, "status")
	next := mergeStatus(old, st, te, obj.GetGeneration(), s.clock.Now())
	if SameJSON(old, next) {
		return nil, nil
	}
	obj.Object["status"] = next
	body, err := unstructuredjson.Marshal(obj.Object)
	if err != nil {
		return nil, fmt.Errorf("encoding status: %w", err)
	}
	raw, err := cached.RawResult(s.rest.Put().AbsPath(cached.ResourcePath(resource, obj.GetNamespace()), obj.GetName(), "status").
		Param("fieldManager", FieldManager).Body(body).Do(ctx))
	if err != nil {
		return nil, fmt.Errorf("writing status: %w", err)
	}
	written, err := cached.DecodeOwner(raw)
	if err != nil {
		return nil, fmt.Errorf("reading the status written: %w", err)
	}
	// An event when Ready changes, not for the first status of a new object unless it failed.
	before, after := ReadyOf(old), ReadyOf(next)
	first := len(before) == 0 && after["status"] == "True" || len(before) == 0 && after["reason"] == evalsi.ReasonRollingOut
	if !first && (before["status"] != after["status"] || before["reason"] != after["reason"]) {
		kind := corev1.EventTypeNormal
		if after["status"] != "True" {
			kind = corev1.EventTypeWarning
		}
		reason, _ := after["reason"].(string)
		msg, _ := after["message"].(string)
		s.recorder.Event(obj, kind, reason, msg)
	}
	return written, nil
}

// mergeStatus returns old with st merged in (Status says how) and observedGeneration set. A
// terminal error te sets Ready=False and Stalled=True with its reason and message, over any Ready
// of st, and records what it refused; without one, Stalled and that record go. A condition that
// is new or whose status flipped has its lastTransitionTime set to at.
func mergeStatus(old map[string]any, st *Status, te *TerminalError, generation int64, at time.Time) map[string]any {
	next := maps.Clone(old)
	if next == nil {
		next = map[string]any{}
	}
	var conditions []Condition
	if st != nil {
		for k, v := range st.Fields {
			if v == nil {
				delete(next, k)
				continue
			}
			next[k] = v
		}
		conditions = st.Conditions
	}
	if te != nil {
		refusal := te.Refused
		if refusal == "" {
			refusal = RefusedSpec
		}
		next[refusedField] = refusal
		conditions = append(conditions,
			Ready(false, te.Reason, te.Error()),
			Condition{Type: evalsi.ConditionStalled, Status: "True", Reason: te.Reason, Message: te.Error()})
	} else {
		delete(next, refusedField)
	}
	next["observedGeneration"] = generation

	// Conditions go through apimachinery's helpers on []metav1.Condition, converted at the edge:
	// SetStatusCondition keeps lastTransitionTime unless the status flipped.
	var holder struct {
		Conditions []metav1.Condition `json:"conditions"`
	}
	if list, ok := old["conditions"].([]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"conditions": list}, &holder); err != nil {
			holder.Conditions = nil // unreadable: every condition starts anew
		}
	}
	// Each type is set once, to its last value here (a terminal error's Ready after the
	// reconcile's), so that an overridden one cannot flip the status and its transition time.
	last := map[string]Condition{}
	for _, c := range conditions {
		last[c.Type] = c
	}
	conds := holder.Conditions
	if te == nil {
		meta.RemoveStatusCondition(&conds, evalsi.ConditionStalled)
	}
	for _, c := range conditions {
		if last[c.Type] != c {
			continue
		}
		delete(last, c.Type)
		meta.SetStatusCondition(&conds, metav1.Condition{
			Type: c.Type, Status: metav1.ConditionStatus(c.Status), Reason: c.Reason, Message: c.Message,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(at.UTC()),
		})
	}
	delete(next, "conditions")
	if len(conds) > 0 {
		out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&struct {
			Conditions []metav1.Condition `json:"conditions"`
		}{conds})
		if err == nil {
			next["conditions"] = out["conditions"]
		}
	}
	return next
}

// refused returns what obj's status records as refused for its current generation (the Stalled
// condition holds for it), or "".
func refused(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != evalsi.ConditionStalled || m["status"] != "True" {
			continue
		}
		if g, ok := unstructuredjson.Number(m["observedGeneration"]); !ok || int64(g) != obj.GetGeneration() {
			return ""
		}
		what, _, _ := unstructured.NestedString(obj.Object, "status", refusedField)
		if what == "" {
			return RefusedSpec // a Stalled written before the record was kept
		}
		return what
	}
	return ""
}

// stalledMessage returns the message of obj's Stalled condition.
func stalledMessage(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == evalsi.ConditionStalled {
			msg, _ := m["message"].(string)
			return msg
		}
	}
	return ""
}

// SameJSON reports whether a and b encode to the same JSON: map keys are sorted and int64 and
// float64 of the same value encode alike, so a status read back from the server compares equal
// to the one computed.
func SameJSON(a, b any) bool {
	ja, err1 := unstructuredjson.Marshal(a)
	jb, err2 := unstructuredjson.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
