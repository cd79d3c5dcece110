package reconcile

import (
	"errors"
	"fmt"
	"time"

	"evals.si/operator/evalsi"
)

// Outcome is what one reconcile decided: the status to hold and when to look again.
type Outcome struct {
	// Status is the object's desired status: the kind's fields and its conditions. The engine adds
	// observedGeneration, keeps lastTransitionTime of conditions that did not flip, and writes the
	// status only when it differs from the object's. Nil leaves the status alone.
	Status *Status
	// RequeueAfter, when positive, reconciles the object again after this long (polling an
	// external state that sends no events). Zero waits for the next event or resync.
	RequeueAfter time.Duration
}

// Status is an object's status as a reconcile computed it.
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

// TerminalError is an error that retrying cannot fix (an invalid spec, a request the server
// rejected): the engine records it and does not requeue until the object changes.
type TerminalError struct {
	Reason string
	Err    error
}

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal wraps err as a TerminalError with a CamelCase reason.
func Terminal(reason string, err error) error {
	return &TerminalError{Reason: reason, Err: err}
}

// Terminalf is Terminal with a formatted message.
func Terminalf(reason, format string, args ...any) error {
	return Terminal(reason, fmt.Errorf(format, args...))
}

// isTerminal reports whether err is (or wraps) a TerminalError.
func isTerminal(err error) bool {
	var t *TerminalError
	return errors.As(err, &t)
}
