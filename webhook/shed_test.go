package webhook

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestShedderRefusesWhatCannotStartInTime holds the one slot of a shedder with a review that does
// not end, then sends another with the API server's ?timeout=: it waits for the slot (how long:
// TestQueueWait), and is refused with 429 and Retry-After, counted; once the slot is free, a
// review is served.
func TestShedderRefusesWhatCannotStartInTime(t *testing.T) {
	m := NewMetrics()
	release, started := make(chan struct{}), make(chan struct{}, 1)
	s := newShedder(1, m)
	h := s.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") != "" {
			started <- struct{}{}
			<-release
		}
	}))
	holder := httptest.NewRecorder()
	go h.ServeHTTP(holder, httptest.NewRequest(http.MethodPost, "/validate?hold=1", nil))
	<-started

	shed := httptest.NewRecorder()
	h.ServeHTTP(shed, httptest.NewRequest(http.MethodPost, "/validate?timeout=200ms", nil))
	if shed.Code != http.StatusTooManyRequests || shed.Header().Get("Retry-After") == "" {
		t.Errorf("a review past capacity: %d, Retry-After %q; want 429 with Retry-After", shed.Code, shed.Header().Get("Retry-After"))
	}
	var d dto.Metric
	if m.shed.Write(&d); d.GetCounter().GetValue() != 1 {
		t.Errorf("evalsi_webhook_shed_total = %v, want 1", d.GetCounter().GetValue())
	}

	close(release)
	served := httptest.NewRecorder()
	h.ServeHTTP(served, httptest.NewRequest(http.MethodPost, "/validate?timeout=200ms", nil))
	if served.Code != http.StatusOK {
		t.Errorf("a review once the slot is free: %d, want 200", served.Code)
	}
}

// TestReviewWaitingOnTheAPIServerGivesItsSlotBack: the one slot of a shedder is held by a review
// that then waits on the API server (offSlot); another review is served meanwhile, and the first
// one finishes with a slot of its own again, which it then gives back.
func TestReviewWaitingOnTheAPIServerGivesItsSlotBack(t *testing.T) {
	s := newShedder(1, NewMetrics())
	release, waiting := make(chan struct{}), make(chan struct{})
	h := s.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") == "" {
			return
		}
		offSlot(r.Context(), func() {
			close(waiting)
			<-release
		})
		if len(s.slots) != 1 {
			t.Errorf("after waiting, %d slots held, want its own", len(s.slots))
		}
	}))
	holder := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(holder, httptest.NewRequest(http.MethodPost, "/validate?hold=1", nil))
	}()
	<-waiting
	other := httptest.NewRecorder()
	// With 10 s of timeout, it waits 5 for a slot before it is shed.
	h.ServeHTTP(other, httptest.NewRequest(http.MethodPost, "/validate?timeout=10s", nil))
	if other.Code != http.StatusOK {
		t.Errorf("a review while the slot's holder waits on the API server: %d, want 200", other.Code)
	}
	close(release)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the holder never took a slot again")
	}
	if holder.Code != http.StatusOK || len(s.slots) != 0 {
		t.Errorf("the holder: %d, %d slots held after it; want 200 and none", holder.Code, len(s.slots))
	}
}

// TestQueueWait: a review waits for a slot half the timeout the API server gave it, or
// maxQueueWait when it gave none or one that cannot be read.
func TestQueueWait(t *testing.T) {
	for query, want := range map[string]time.Duration{
		"?timeout=200ms": 100 * time.Millisecond,
		"?timeout=10s":   5 * time.Second,
		"":               maxQueueWait,
		"?timeout=soon":  maxQueueWait,
		"?timeout=-1s":   maxQueueWait,
	} {
		if got := queueWait(httptest.NewRequest(http.MethodPost, "/validate"+query, nil)); got != want {
			t.Errorf("%q: %s, want %s", query, got, want)
		}
	}
}
