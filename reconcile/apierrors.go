package reconcile

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"evals.si/operator/evalsi"
)

// apiFailure maps an error of an evalsid call to the Ready condition that explains it and the
// error that decides the retry:
//   - InvalidArgument, FailedPrecondition: the server refuses the request as it is; terminal.
//   - Unavailable, DeadlineExceeded, ResourceExhausted: the server is away or busy; retried
//     with backoff (reason APIUnavailable).
//   - Unauthenticated, PermissionDenied: reported as such and retried with backoff, since a
//     rotated token or a new role binding fixes them without a change to the object.
func apiFailure(what string, err error) (Condition, error) {
	code := connect.CodeOf(err)
	msg := fmt.Sprintf("%s: %s", what, connectMessage(err))
	switch code {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		return Ready(false, evalsi.ReasonRejected, msg), Terminal(evalsi.ReasonRejected, errors.New(msg))
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeResourceExhausted:
		return Ready(false, evalsi.ReasonAPIUnavailable, msg), fmt.Errorf("%s: %w", what, err)
	case connect.CodeUnauthenticated:
		return Ready(false, evalsi.ReasonUnauthenticated, msg), fmt.Errorf("%s: %w", what, err)
	case connect.CodePermissionDenied:
		return Ready(false, evalsi.ReasonPermissionDenied, msg), fmt.Errorf("%s: %w", what, err)
	default:
		return Ready(false, evalsi.ReasonAPIError, msg), fmt.Errorf("%s: %w", what, err)
	}
}

// connectMessage is the code and message of a Connect error, without transport detail that
// would make a condition's message change from one attempt to the next.
func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code().String() + ": " + ce.Message()
	}
	return err.Error()
}
