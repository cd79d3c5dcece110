package webhook

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
)

// Defaults of Answers, as the API server's own webhook authorizer caches its decisions: an
// allowed answer is kept longer than a refused one, so that a right just granted is seen soon;
// both are bounded, so that a revoked right is refused again within AllowedTTL.
const (
	DefaultAllowedTTL = 10 * time.Second
	DefaultDeniedTTL  = 2 * time.Second
	DefaultMaxAnswers = 10000
)

// Answers remembers, briefly, what Access learned from the API server: the refusal of a
// reference ("" when allowed), keyed by the whole question (the user, groups, uid and extra of a
// SubjectAccessReview and its attributes; the namespace and name of a service account). Without
// it every review asked one SubjectAccessReview per reference, and the webhook's own rate limit
// capped admission of objects with references at about 110 reviews a second (two references
// each), answering the rest 429; a GitOps sync of a few hundred objects asks the same few
// questions hundreds of times. Identical questions in flight are asked once, and the sharers get
// the one answer.
type Answers struct {
	// AllowedTTL and DeniedTTL are how long an allowed and a refused answer are kept; an error is
	// never kept.
	AllowedTTL, DeniedTTL time.Duration

	cache  *utilcache.LRUExpireCache
	mu     sync.Mutex
	asking map[string]*question
	served *prometheus.CounterVec
}

// question is one question being asked: the sharers wait for done.
type question struct {
	done    chan struct{}
	refusal string
	err     error
}

// NewAnswers returns a cache of at most maxEntries answers (DefaultMaxAnswers when 0), kept for
// allowed and denied (the defaults when 0), counted in m.
func NewAnswers(allowed, denied time.Duration, maxEntries int, m *Metrics) *Answers {
	return newAnswers(allowed, denied, maxEntries, m, clock.RealClock{})
}

// newAnswers is NewAnswers on clk.
func newAnswers(allowed, denied time.Duration, maxEntries int, m *Metrics, clk utilcache.Clock) *Answers {
	if allowed <= 0 {
		allowed = DefaultAllowedTTL
	}
	if denied <= 0 {
		denied = DefaultDeniedTTL
	}
	if maxEntries <= 0 {
		maxEntries = DefaultMaxAnswers
	}
	return &Answers{AllowedTTL: allowed, DeniedTTL: denied, cache: utilcache.NewLRUExpireCacheWithClock(maxEntries, clk),
		asking: map[string]*question{}, served: m.accessAnswers}
}

// kept returns the kept answer to the question key, if there is one.
func (a *Answers) kept(key string) (string, bool) {
	v, ok := a.cache.Get(key)
	if !ok {
		return "", false
	}
	a.served.WithLabelValues("kept").Inc()
	return v.(string), true
}

// askTimeout bounds a question asked of the API server, whoever still waits for it: the
// longest an API server gives a webhook's call.
const askTimeout = 30 * time.Second

// refusal returns the answer to the question key: kept, being asked for another review, or asked
// now with ask. The question is asked apart from any one review, so that the review that asked it
// first going away (its caller's timeout) fails none of the others waiting for the answer; each
// waits as long as its own ctx lasts.
func (a *Answers) refusal(ctx context.Context, key string, ask func(context.Context) (string, error)) (string, error) {
	if r, ok := a.kept(key); ok {
		return r, nil
	}
	a.mu.Lock()
	q, ok := a.asking[key]
	if ok {
		a.served.WithLabelValues("shared").Inc()
	} else {
		q = &question{done: make(chan struct{})}
		a.asking[key] = q
		a.served.WithLabelValues("asked").Inc()
		go a.answer(context.WithoutCancel(ctx), key, q, ask)
	}
	a.mu.Unlock()
	select {
	case <-q.done:
		return q.refusal, q.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// answer asks the question key, keeps its answer for its lifetime (an error for none) and tells
// whoever waits.
func (a *Answers) answer(ctx context.Context, key string, q *question, ask func(context.Context) (string, error)) {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	q.refusal, q.err = ask(ctx)
	if q.err == nil {
		ttl := a.AllowedTTL
		if q.refusal != "" {
			ttl = a.DeniedTTL
		}
		a.cache.Add(key, q.refusal, ttl)
	}
	a.mu.Lock()
	delete(a.asking, key)
	a.mu.Unlock()
	close(q.done)
}
