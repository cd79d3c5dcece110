package engine

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// waiters are the objects whose last reconcile failed because an API was away: evalsid (Away),
// or the API server itself (unreachable, cached/apigate.go). Their per-object backoff grows while it is down, so that after a long outage they would
// come back one by one over as long again. Instead, the first call the API answers
// (ExternalAnswered) puts every waiting object back on its queue at once (the client's rate limit
// spreads them), and while objects wait one of them is retried every canaryInterval, so that a
// recovery is noticed within that interval even when every backoff is long. Level triggered
// still: a missed recovery only leaves the objects to their own backoff.
type waiters struct {
	// away says whether a reconcile's error was the API's absence.
	away func(error) bool
	mu   sync.Mutex
	keys map[keyQueue]map[string]bool
	// requeued counts the objects answered puts back.
	requeued prometheus.Counter
}

// canaryInterval is how often one waiting object is retried while the external API is away.
const canaryInterval = 2 * time.Second

// awayError marks an error of an external API that was not there to answer.
type awayError struct{ err error }

func (a awayError) Error() string { return a.err.Error() }
func (a awayError) Unwrap() error { return a.err }

// Away marks err as the failure of an external API that was away (unavailable, timed out,
// overloaded): the object waits for the API to answer again.
func Away(err error) error { return awayError{err} }

// IsAway reports whether err is (or wraps) an error marked by Away.
func IsAway(err error) bool {
	var a awayError
	return errors.As(err, &a)
}

// keyQueue is a controller's work queue, as the waiters use it.
type keyQueue interface {
	Add(key string)
	Forget(key string)
}

// note records how the reconcile of key, from q, ended: waiting on the external API, or not.
func (w *waiters) note(q keyQueue, key string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.away(err) {
		if w.keys == nil {
			w.keys = map[keyQueue]map[string]bool{}
		}
		if w.keys[q] == nil {
			w.keys[q] = map[string]bool{}
		}
		w.keys[q][key] = true
		return
	}
	delete(w.keys[q], key)
}

// answered requeues every waiting object now: the external API answered a call.
func (w *waiters) answered() {
	w.mu.Lock()
	waiting := w.keys
	w.keys = nil
	w.mu.Unlock()
	for q, keys := range waiting {
		for key := range keys {
			q.Forget(key)
			q.Add(key)
			w.requeued.Inc()
		}
	}
}

// retryOne puts one waiting object back on its queue, to find out whether the API is back.
func (w *waiters) retryOne() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for q, keys := range w.keys {
		for key := range keys {
			q.Add(key)
			return
		}
	}
}
