package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"evals.si/operator/shard"
)

// TenureOverError is why a write was not sent: the request's context carries the tenure of a
// shard's Lease (shard.WithTenure) that ended, so another replica may hold the shard now; or,
// with Warm, the engine warms a shard whose Lease this replica does not hold yet
// (Config.Writable).
type TenureOverError struct {
	Until time.Time
	Warm  bool
}

func (e *TenureOverError) Error() string {
	if e.Warm {
		return "not sent: this replica warms its shard, and writes once it holds the shard's Lease"
	}
	return fmt.Sprintf("not sent: this replica's hold on its shard ended at %s (no renewal of the shard's Lease accepted for a renew deadline; another replica may hold it)",
		e.Until.Format(time.RFC3339Nano))
}

// CheckTenure returns a TenureOverError when ctx carries a shard's tenure that has ended, or the
// gate of a warm engine that is still shut (withWritable); nil while it holds or when ctx carries
// neither (an operator that does not elect). Every write the engine's kinds make, to the API
// server (fenceWrites) or to evalsid, is checked with it first.
func CheckTenure(ctx context.Context) error {
	if w, ok := ctx.Value(writableKey{}).(<-chan struct{}); ok {
		select {
		case <-w:
		default:
			return &TenureOverError{Warm: true}
		}
	}
	if t := shard.TenureOf(ctx); t != nil && !t.Holds(time.Now()) {
		return &TenureOverError{Until: t.Until()}
	}
	return nil
}

// isWarmRefusal reports whether err is a write that a warm engine did not send.
func isWarmRefusal(err error) bool {
	var over *TenureOverError
	return errors.As(err, &over) && over.Warm
}

type writableKey struct{}

// withWritable returns ctx carrying a warm engine's gate (Config.Writable; nil carries none): the
// writes of requests made under it are sent only once the gate is closed, whatever the tenure
// says (the shard's tenure may still hold from a hold of the shard that this replica gave up
// moments ago).
func withWritable(ctx context.Context, writable <-chan struct{}) context.Context {
	if writable == nil {
		return ctx
	}
	return context.WithValue(ctx, writableKey{}, writable)
}

// fenceWrites wraps a client transport: a request that may change something (any method but
// GET, HEAD and OPTIONS) made under an ended tenure is not sent. Reads go on, so that the caches
// stay current for when the shard is held again.
func fenceWrites(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return rt.RoundTrip(req)
		}
		if err := CheckTenure(req.Context()); err != nil {
			return nil, err
		}
		return rt.RoundTrip(req)
	})
}
