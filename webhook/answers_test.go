package webhook

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestAnswersKeptForTheirLifetime: an allowed answer is asked once and kept for AllowedTTL, a
// refused one for the shorter DeniedTTL, an error never; past its lifetime a question is asked
// again (so a revoked right is refused again within AllowedTTL), and the cache holds no more
// than its bound.
func TestAnswersKeptForTheirLifetime(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	m := NewMetrics()
	a := newAnswers(10*time.Second, 2*time.Second, 2, m, clk)
	ctx := context.Background()
	answers := map[string]string{"may": "", "may-not": "tina may not get secrets db"}
	var asked []string
	ask := func(key string) string {
		t.Helper()
		got, err := a.refusal(ctx, key, func(context.Context) (string, error) {
			asked = append(asked, key)
			return answers[key], nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != answers[key] {
			t.Fatalf("%s: %q, want %q", key, got, answers[key])
		}
		return got
	}
	step := func(d time.Duration, keys ...string) {
		clk.Step(d)
		for _, k := range keys {
			ask(k)
		}
	}
	step(0, "may", "may-not", "may", "may-not")
	step(time.Second, "may", "may-not")           // both kept
	step(1500*time.Millisecond, "may", "may-not") // 2.5 s: the refusal asked again
	step(7600*time.Millisecond, "may")            // 10.1 s: the allowed one too
	step(0, "third")                              // the bound: the least recently used goes
	step(0, "may-not")                            // it was may-not
	want := []string{"may", "may-not", "may-not", "may", "third", "may-not"}
	if diff := cmp.Diff(want, asked); diff != "" {
		t.Errorf("questions asked of the API server (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(m.accessAnswers.WithLabelValues("kept")); got != 5 {
		t.Errorf("kept answers served: %v, want 5", got)
	}

	failing := errors.New("the API server is away")
	for range 2 {
		if _, err := a.refusal(ctx, "flaky", func(context.Context) (string, error) { return "", failing }); !errors.Is(err, failing) {
			t.Fatalf("%v, want the error", err)
		}
	}
	if got := testutil.ToFloat64(m.accessAnswers.WithLabelValues("asked")); got != 8 {
		t.Errorf("questions asked: %v, want 8 (an error is never kept)", got)
	}
}

// TestAnswersInFlightAreShared: reviews asking the same question while it is being asked wait
// for the one answer instead of asking again.
func TestAnswersInFlightAreShared(t *testing.T) {
	m := NewMetrics()
	a := NewAnswers(0, 0, 0, m)
	release := make(chan struct{})
	var calls sync.WaitGroup
	const reviews = 20
	results := make([]string, reviews)
	calls.Add(reviews)
	for i := range reviews {
		go func() {
			defer calls.Done()
			results[i], _ = a.refusal(context.Background(), "q", func(context.Context) (string, error) {
				<-release
				return "refused", nil
			})
		}()
	}
	// Every other review is waiting for the first one's answer once 19 were counted as shared.
	for deadline := time.Now().Add(time.Minute); testutil.ToFloat64(m.accessAnswers.WithLabelValues("shared")) < reviews-1; {
		if time.Now().After(deadline) {
			t.Fatal("the reviews never all asked")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	calls.Wait()
	for i, r := range results {
		if r != "refused" {
			t.Errorf("review %d: %q", i, r)
		}
	}
	if got := testutil.ToFloat64(m.accessAnswers.WithLabelValues("asked")); got != 1 {
		t.Errorf("asked %v times, want once", got)
	}
}

// TestAnswersOutliveTheirFirstAsker: the review that asked a question goes away (its caller's
// timeout) while another waits for the same answer; the other still gets it.
func TestAnswersOutliveTheirFirstAsker(t *testing.T) {
	m := NewMetrics()
	a := NewAnswers(0, 0, 0, m)
	release := make(chan struct{})
	ask := func(ctx context.Context) (string, error) {
		select {
		case <-release:
			return "refused", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	first, cancelFirst := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, err := a.refusal(first, "q", ask)
		firstDone <- err
	}()
	for deadline := time.Now().Add(time.Minute); testutil.ToFloat64(m.accessAnswers.WithLabelValues("asked")) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the first review never asked")
		}
		time.Sleep(time.Millisecond)
	}
	second := make(chan string, 1)
	go func() {
		r, _ := a.refusal(context.Background(), "q", ask)
		second <- r
	}()
	for deadline := time.Now().Add(time.Minute); testutil.ToFloat64(m.accessAnswers.WithLabelValues("shared")) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the second review never waited for the answer")
		}
		time.Sleep(time.Millisecond)
	}
	cancelFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the first review: %v, want its own cancellation", err)
	}
	close(release)
	select {
	case r := <-second:
		if r != "refused" {
			t.Errorf("the second review: %q, want the answer", r)
		}
	case <-time.After(time.Minute):
		t.Fatal("the second review never got the answer")
	}
}
