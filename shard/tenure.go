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

// Holds reports whether the tenure lasts beyond now.
func (t *Tenure) Holds(now time.Time) bool {
	until := t.until.Load()
	return until != nil && now.Before(*until)
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
