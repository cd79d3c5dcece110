package apicall

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
)

func TestAPIFailure(t *testing.T) {
	for name, tc := range map[string]struct {
		code     connect.Code
		reason   string
		terminal bool
	}{
		"invalid argument":    {connect.CodeInvalidArgument, evalsi.ReasonRejected, true},
		"failed precondition": {connect.CodeFailedPrecondition, evalsi.ReasonRejected, true},
		"unavailable":         {connect.CodeUnavailable, evalsi.ReasonAPIUnavailable, false},
		"deadline exceeded":   {connect.CodeDeadlineExceeded, evalsi.ReasonAPIUnavailable, false},
		"resource exhausted":  {connect.CodeResourceExhausted, evalsi.ReasonAPIUnavailable, false},
		"unauthenticated":     {connect.CodeUnauthenticated, evalsi.ReasonUnauthenticated, false},
		"permission denied":   {connect.CodePermissionDenied, evalsi.ReasonPermissionDenied, false},
		"internal":            {connect.CodeInternal, evalsi.ReasonAPIError, false},
	} {
		t.Run(name, func(t *testing.T) {
			err := Failure("creating the run", connect.NewError(tc.code, errors.New("because")))
			var f *engine.Failed
			if !errors.As(err, &f) {
				t.Fatalf("%v is not an engine.Failed", err)
			}
			cond := f.Status.Conditions[0]
			if cond.Reason != tc.reason || cond.Status != "False" || !strings.Contains(cond.Message, "creating the run") {
				t.Errorf("condition %+v, want Ready=False %s naming what failed", cond, tc.reason)
			}
			if engine.IsTerminal(f.Err) != tc.terminal {
				t.Errorf("terminal = %v, want %v", engine.IsTerminal(f.Err), tc.terminal)
			}
			if engine.IsAway(f.Err) != (tc.reason == evalsi.ReasonAPIUnavailable) {
				t.Errorf("away = %v, want it only for %s", engine.IsAway(f.Err), evalsi.ReasonAPIUnavailable)
			}
		})
	}
}
