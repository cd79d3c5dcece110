package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"evals.si/operator/evalsi"
)

// now is the clock of lastTransitionTime.
var now = func() time.Time { return time.Now().UTC() }

// writeStatus writes st as obj's status when it differs from what obj holds, and records an
// Event when the Ready condition changed. It returns the object written as the cache keeps it, or
// nil when nothing was: nothing is written at steady state.
func (e *Engine) writeStatus(ctx context.Context, k *kind, obj *unstructured.Unstructured, st *Status) (*cachedOwner, error) {
	old, _, _ := unstructured.NestedMap(obj.Object, "status")
	next := buildStatus(old, st, obj.GetGeneration())
	if sameJSON(old, next) {
		return nil, nil
	}
	obj.Object["status"] = next
	body, err := obj.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encoding status: %w", err)
	}
	raw, err := rawResult(e.rest.Put().AbsPath(resourcePath(k.gvr, obj.GetNamespace()), obj.GetName(), "status").
		VersionedParams(&metav1.UpdateOptions{FieldManager: FieldManager}, metav1.ParameterCodec).Body(body).Do(ctx))
	if err != nil {
		return nil, fmt.Errorf("writing status: %w", err)
	}
	written, err := decodeOwner(raw)
	if err != nil {
		return nil, fmt.Errorf("reading the status written: %w", err)
	}
	// An event when Ready changes, not for the first status of a new object unless it failed.
	before, after := readyOf(old), readyOf(next)
	first := len(before) == 0 && after["status"] == "True" || len(before) == 0 && after["reason"] == evalsi.ReasonRollingOut
	if !first && (before["status"] != after["status"] || before["reason"] != after["reason"]) {
		kind := corev1.EventTypeNormal
		if after["status"] != "True" {
			kind = corev1.EventTypeWarning
		}
		reason, _ := after["reason"].(string)
		msg, _ := after["message"].(string)
		e.recorder.Event(obj, kind, reason, msg)
	}
	return written, nil
}

// buildStatus returns the status map for st: its fields, observedGeneration and conditions whose
// lastTransitionTime is kept from old unless the condition's status flipped.
func buildStatus(old map[string]any, st *Status, generation int64) map[string]any {
	next := maps.Clone(st.Fields)
	if next == nil {
		next = map[string]any{}
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
	// The last condition of a type wins (a terminal error's Ready overrides the reconcile's); only
	// it is set, so that an overridden one cannot flip the status and its transition time.
	last := map[string]Condition{}
	for _, c := range st.Conditions {
		last[c.Type] = c
	}
	conds, wanted := holder.Conditions, map[string]bool{}
	for _, c := range st.Conditions {
		if last[c.Type] != c || wanted[c.Type] {
			continue
		}
		wanted[c.Type] = true
		meta.SetStatusCondition(&conds, metav1.Condition{
			Type: c.Type, Status: metav1.ConditionStatus(c.Status), Reason: c.Reason, Message: c.Message,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now()),
		})
	}
	for _, c := range holder.Conditions {
		if !wanted[c.Type] {
			meta.RemoveStatusCondition(&conds, c.Type)
		}
	}
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

// statusFields are the kind's own fields of obj's status, to keep as they are when a reconcile
// reports a failure without recomputing them.
func statusFields(obj *unstructured.Unstructured) map[string]any {
	st, _, _ := unstructured.NestedMap(obj.Object, "status")
	delete(st, "conditions")
	delete(st, "observedGeneration")
	return st
}

// stalled reports whether obj's status holds Stalled=True for its current generation: a terminal
// failure that nothing but a new spec can change.
func stalled(obj *unstructured.Unstructured) bool { return stalledCondition(obj) != nil }

// stalledCondition returns obj's Stalled=True condition when it is for obj's current generation,
// else nil.
func stalledCondition(obj *unstructured.Unstructured) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != evalsi.ConditionStalled || m["status"] != "True" {
			continue
		}
		if g, ok := number(m["observedGeneration"]); ok && int64(g) == obj.GetGeneration() {
			return m
		}
		return nil
	}
	return nil
}

// readyOf returns the Ready condition in a status map, or an empty map.
func readyOf(status map[string]any) map[string]any {
	list, _ := status["conditions"].([]any)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok && m["type"] == evalsi.ConditionReady {
			return m
		}
	}
	return map[string]any{}
}

// sameJSON reports whether a and b encode to the same JSON: map keys are sorted and int64 and
// float64 of the same value encode alike, so a status read back from the server compares equal
// to the one computed.
func sameJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
