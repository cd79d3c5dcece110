package engine

import (
	"errors"
	"fmt"
	"time"

	"evals.si/operator/evalsi"
)

// Outcome is what one reconcile decided: the status to hold and when to look again.
type Outcome struct {
	// Status is what the reconcile says of the object's status; the engine merges it into the
	// status the object holds (Status) and writes it only when that changes. Nil leaves the status
	// alone.
	Status *Status
	// RequeueAfter, when positive, reconciles the object again after this long (polling an
	// external state that sends no events). Zero waits for the next event or resync.
	RequeueAfter time.Duration
}

// Status is what a reconcile says of an object's status. It is merged into the status the object
// holds: each field given is set, a field given as nil is removed, and fields not given are kept;
// each condition is set by its type, keeping its lastTransitionTime unless its status flipped, and
// conditions of other types are kept. So a reconcile that could not learn everything (evalsid
// away) reports what it knows without erasing the rest. The engine adds observedGeneration and
// owns the Stalled condition (set by a TerminalError, removed by any other outcome).
type Status struct {
	Fields     map[string]any
	Conditions []Condition
}

// Condition is a status condition in the metav1.Condition shape, without the times the engine
// fills in.
type Condition struct {
	Type    string
	Status  string // "True", "False" or "Unknown"
	Reason  string // CamelCase
	Message string // stable: no timestamps or counters that change every reconcile
}

// Ready returns the Ready condition: True with reason, or False with reason and message.
func Ready(ok bool, reason, message string) Condition {
	s := "False"
	if ok {
		s = "True"
	}
	return Condition{Type: evalsi.ConditionReady, Status: s, Reason: reason, Message: message}
}

// NotReady returns a Status that holds only Ready=False with reason and message.
func NotReady(reason, message string) *Status {
	return &Status{Conditions: []Condition{Ready(false, reason, message)}}
}

// TerminalError is an error that retrying cannot fix (an invalid spec, a request the server
// rejected): the engine records it as Ready=False and Stalled, and the kind does not try the same
// thing again until the object's generation changes.
type TerminalError struct {
	Reason string
	Err    error
	// Refused names what was refused, for Request.Refused: RefusedSpec for the spec as a whole,
	// or what a kind knows it by (the rendering of a child). Empty means RefusedSpec.
	Refused string
}

// RefusedSpec is the Refused of a TerminalError that refuses the spec as a whole.
const RefusedSpec = "spec"

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal wraps err as a TerminalError with a CamelCase reason, refusing the spec.
func Terminal(reason string, err error) error {
	return &TerminalError{Reason: reason, Err: err, Refused: RefusedSpec}
}

// Terminalf is Terminal with a formatted message.
func Terminalf(reason, format string, args ...any) error {
	return Terminal(reason, fmt.Errorf(format, args...))
}

// IsTerminal reports whether err is (or wraps) a TerminalError.
func IsTerminal(err error) bool {
	var t *TerminalError
	return errors.As(err, &t)
}

// ReadyOf returns the Ready condition in a status map, or an empty map.
func ReadyOf(status map[string]any) map[string]any {
	list, _ := status["conditions"].([]any)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok && m["type"] == evalsi.ConditionReady {
			return m
		}
	}
	return map[string]any{}
}
