package reconcile

import (
	"sync"
	"time"

	"connectrpc.com/connect"
)

// apiWaiters are the objects whose last reconcile failed because evalsid was away (Unavailable,
// DeadlineExceeded, ResourceExhausted). Their per-object backoff grows while evalsid is down, so
// that after a long outage they would come back one by one over as long again. Instead, the first
// call evalsid answers puts every waiting object back on its queue at once (the client's rate
// limit spreads them), and while objects wait one of them is retried every canaryInterval, so
// that a recovery is noticed within that interval even when every backoff is long. Level
// triggered still: a missed recovery only leaves the objects to their own backoff.
type apiWaiters struct {
	mu   sync.Mutex
	keys map[*controller]map[string]bool
}

// canaryInterval is how often one waiting object is retried while evalsid is away.
const canaryInterval = 2 * time.Second

// serverAway reports whether a call failed because evalsid was not there to answer.
func serverAway(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeResourceExhausted:
		return true
	}
	return false
}

// note records how the reconcile of key ended: waiting on evalsid, or not.
func (w *apiWaiters) note(c *controller, key string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil && serverAway(err) {
		if w.keys == nil {
			w.keys = map[*controller]map[string]bool{}
		}
		if w.keys[c] == nil {
			w.keys[c] = map[string]bool{}
		}
		w.keys[c][key] = true
		return
	}
	delete(w.keys[c], key)
}

// observe is told every evalsid call's result code; an answer from the server requeues every
// waiting object now.
func (w *apiWaiters) observe(code string) {
	switch code {
	case connect.CodeUnavailable.String(), connect.CodeDeadlineExceeded.String(), connect.CodeResourceExhausted.String(), connect.CodeUnknown.String():
		return
	}
	w.mu.Lock()
	waiting := w.keys
	w.keys = nil
	w.mu.Unlock()
	for c, keys := range waiting {
		for key := range keys {
			c.queue.Forget(key)
			c.queue.Add(key)
		}
	}
}

// retryOne puts one waiting object back on its queue, to find out whether evalsid is back.
func (w *apiWaiters) retryOne() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c, keys := range w.keys {
		for key := range keys {
			c.queue.Add(key)
			return
		}
	}
}
