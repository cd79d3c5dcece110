// Package apicall turns the failures of evalsid calls into what the engine acts on: the Ready
// condition that explains a failure, and the error that decides its retry. The kinds kept in
// evalsid (runs, monitors) share it.
package apicall

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
)

// Failure maps an error of an evalsid call (what says what was being done) to an
// engine.Failed: the status that explains it and the error that decides the retry.
//   - InvalidArgument, FailedPrecondition: the server refuses the request as it is; terminal.
//   - Unavailable, DeadlineExceeded, ResourceExhausted: the server is away or busy; retried with
//     backoff (reason APIUnavailable), and at once when evalsid answers again (engine.Away).
//   - Unauthenticated, PermissionDenied: reported as such and retried with backoff, since a
//     rotated token or a new binding fixes them without a change to the object.
//   - A call not sent because the shard's tenure ended (FenceCalls) is returned without a
//     status, as a child's apply refused for it is: the failure is this replica's, not the
//     object's, and a renewal accepted before the status write would let it through, putting
//     "not sent" on an object the call never reached. The engine requeues it.
func Failure(what string, err error) error {
	if errors.As(err, new(*engine.TenureOverError)) {
		return fmt.Errorf("%s: %w", what, err)
	}
	code := connect.CodeOf(err)
	msg := fmt.Sprintf("%s: %s", what, message(err))
	failed := func(reason string, retry error) error {
		return &engine.Failed{Status: engine.NotReady(reason, msg), Err: retry}
	}
	wrapped := fmt.Errorf("%s: %w", what, err)
	switch code {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		return failed(evalsi.ReasonRejected, engine.Terminal(evalsi.ReasonRejected, errors.New(msg)))
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeResourceExhausted:
		return failed(evalsi.ReasonAPIUnavailable, engine.Away(wrapped))
	case connect.CodeUnauthenticated:
		return failed(evalsi.ReasonUnauthenticated, wrapped)
	case connect.CodePermissionDenied:
		return failed(evalsi.ReasonPermissionDenied, wrapped)
	default:
		return failed(evalsi.ReasonAPIError, wrapped)
	}
}

// Answered reports whether a call's result code says that evalsid answered (as opposed to being
// away), for the engine's ExternalAnswered.
func Answered(code string) bool {
	switch code {
	case connect.CodeUnavailable.String(), connect.CodeDeadlineExceeded.String(), connect.CodeResourceExhausted.String(), connect.CodeUnknown.String():
		return false
	}
	return true
}

// message is the code and message of a Connect error, without transport detail that would make a
// condition's message change from one attempt to the next.
func message(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code().String() + ": " + ce.Message()
	}
	return err.Error()
}
