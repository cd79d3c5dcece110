package shard

import (
	"context"
	"sync/atomic"
	"time"
)

// Tenure is how long this replica may still write a shard's objects: until a renew deadline after
// it sent the last renewal of the shard's Lease that the API server accepted. Another replica
// takes the Lease only a Lease duration, which is longer, after it saw that renewal, so writes
// sent within the tenure come before the next holder's. A replica's elector notices a Lease lost
// only when its own renewals have failed for a renew deadline; a process that was stopped (a
// long pause of it or its machine) resumes with its workers running and its elector not yet
// given up, and the tenure is what keeps it from writing then.
type Tenure struct{ until atomic.Pointer[time.Time] }

// Extend moves the tenure to by after sent, when a renewal sent then was accepted; it never
// moves it back.
func (t *Tenure) Extend(sent time.Time, by time.Duration) {
	until := sent.Add(by)
	for {
		cur := t.until.Load()
		if cur != nil && !until.After(*cur) {
			return
		}
		if t.until.CompareAndSwap(cur, &until) {
			return
		}
	}
}

// Holds reports whether the tenure lasts beyond now, by both of now's clocks. By the monotonic
// one, so that a wall clock set back does not lengthen it; and by the wall clock, because the
// monotonic one (Linux's CLOCK_MONOTONIC, which Go reads) stands still while the machine is
// suspended, so that a replica whose machine slept past the Lease duration would resume still
// holding by it. A wall clock set forward only ends the tenure early, until the next renewal.
func (t *Tenure) Holds(now time.Time) bool { return t.holds(now, now.Round(0)) }

// holds is Holds with the monotonic reading now and the wall reading wall.
func (t *Tenure) holds(now, wall time.Time) bool {
	until := t.until.Load()
	return until != nil && now.Before(*until) && wall.Before(until.Round(0))
}

// Until returns when the tenure ends (zero before any renewal).
func (t *Tenure) Until() time.Time {
	if until := t.until.Load(); until != nil {
		return *until
	}
	return time.Time{}
}

type tenureKey struct{}

// WithTenure returns ctx carrying t: the writes of requests made under it are sent only within t.
func WithTenure(ctx context.Context, t *Tenure) context.Context {
	return context.WithValue(ctx, tenureKey{}, t)
}

// TenureOf returns the tenure ctx carries, or nil.
func TenureOf(ctx context.Context) *Tenure {
	t, _ := ctx.Value(tenureKey{}).(*Tenure)
	return t
}
