package apicall

import (
	"context"

	"connectrpc.com/connect"

	"evals.si/operator/reconcile/engine"
)

// FenceCalls is the evalsid client's interceptor that holds its calls to the shard's tenure, as
// the engine's transport holds its writes to the API server: a call that may change something
// (any procedure not marked NO_SIDE_EFFECTS: CreateRun, CancelRun, the puts and deletes) made
// under an ended tenure is not sent, and fails with an engine.TenureOverError. Without it, a
// replica resumed after a long pause would send the calls of its time away: a policy put with a
// spec older than the one the shard's new holder put.
func FenceCalls() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().IdempotencyLevel != connect.IdempotencyNoSideEffects {
				if err := engine.CheckTenure(ctx); err != nil {
					return nil, err
				}
			}
			return next(ctx, req)
		}
	}
}
