package webhook

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"time"

	"golang.org/x/net/netutil"
)

// Shedding bounds what the webhook takes on past its capacity, instead of queueing it: before,
// at 2,000 reviews a second on two cores, each request waited longer than the last, p99 reached
// 8.8 s and memory 578 MiB. Two bounds (BenchmarkWebhookOverload measures them side by side with
// none):
//   - Connections (limitConnections): the most cost. Past capacity the API server opens a
//     connection for each call that finds its others busy, and each costs a TLS handshake worth
//     more than the review it carries. Past the bound a new connection waits in the kernel's
//     backlog, costing nothing, until another closes.
//   - Reviews in flight (shedder): a request that finds every slot busy waits for one at most
//     half of the timeout the API server gave it (its ?timeout=, else maxQueueWait), and while no
//     more others wait than there are slots; otherwise it is answered 429 Too Many Requests with
//     Retry-After, without its body being read. The API server then fails the write it was
//     admitting (the webhooks fail closed), and the writer retries.
type shedder struct {
	slots   chan struct{}
	waiting chan struct{}
	metrics *Metrics
}

const (
	// maxQueueWait bounds how long a request waits for a slot when its caller gave no timeout.
	maxQueueWait = time.Second
	// slotsPerCPU is how many reviews run at once per CPU: a review is CPU-bound (decode,
	// schema, render), so more in flight only lengthens each.
	slotsPerCPU = 4
)

// newShedder returns a shedder with inFlight slots (slotsPerCPU per CPU when 0) and as many
// waiting places again.
func newShedder(inFlight int, m *Metrics) *shedder {
	if inFlight <= 0 {
		inFlight = slotsPerCPU * runtime.GOMAXPROCS(0)
	}
	return &shedder{slots: make(chan struct{}, inFlight), waiting: make(chan struct{}, inFlight), metrics: m}
}

// wrap serves h within the shedder's bounds.
func (s *shedder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.acquire(r) {
			s.metrics.shed.Inc()
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the admission webhook is at capacity; retry", http.StatusTooManyRequests)
			return
		}
		held := &heldSlot{shedder: s, held: true}
		defer held.release()
		s.metrics.inFlight.Inc()
		defer s.metrics.inFlight.Dec()
		start := time.Now()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), heldSlotKey{}, held)))
		s.metrics.duration.Observe(time.Since(start).Seconds())
	})
}

// acquire takes a slot, at once or after waiting (see shedder); false means shed.
func (s *shedder) acquire(r *http.Request) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	select {
	case s.waiting <- struct{}{}:
		defer func() { <-s.waiting }()
	default:
		return false
	}
	t := time.NewTimer(queueWait(r))
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-r.Context().Done():
		return false
	}
}

// heldSlot is the slot of the review being served, which it gives back while it waits on the
// network (offSlot).
type heldSlot struct {
	shedder *shedder
	held    bool
}

func (h *heldSlot) release() {
	if h.held {
		<-h.shedder.slots
		h.held = false
	}
}

// heldSlotKey is the context key of a review's heldSlot.
type heldSlotKey struct{}

// offSlot runs wait, which waits on the API server and uses no CPU, without holding the slot of
// the review ctx serves, and takes a slot again before it returns (waiting for one as long as
// ctx lasts; the review is admitted already, so it is not shed). A slot bounds the CPU-bound work
// of reviews: a review waiting on a SubjectAccessReview while holding one kept others from the
// CPU it was not using, and past eight such reviews on two cores the rest were shed. What
// reviews wait on the network at once stays bounded by the connections served.
func offSlot(ctx context.Context, wait func()) {
	h, ok := ctx.Value(heldSlotKey{}).(*heldSlot)
	if !ok || !h.held {
		wait()
		return
	}
	h.release()
	wait()
	select {
	case h.shedder.slots <- struct{}{}:
		h.held = true
	case <-ctx.Done():
	}
}

// queueWait is half the timeout the API server gave the call (?timeout=5s), else maxQueueWait.
func queueWait(r *http.Request) time.Duration {
	if d, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && d > 0 {
		return d / 2
	}
	return maxQueueWait
}

// connectionsPerCPU bounds the connections served at once, per CPU. Past capacity the API server
// opens a connection for each call that finds its others busy, and each costs a TLS handshake,
// which costs more than the review it carries: served, they crowd out the reviews and make yet
// more calls find theirs busy. Past the bound a new connection waits in the kernel's backlog,
// costing nothing, until one closes.
const connectionsPerCPU = 32

// limitConnections bounds the connections l serves at once to n (connectionsPerCPU per CPU when
// 0).
func limitConnections(l net.Listener, n int) net.Listener {
	if n <= 0 {
		n = connectionsPerCPU * runtime.GOMAXPROCS(0)
	}
	return netutil.LimitListener(l, n)
}
