package runs

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	testingclock "k8s.io/utils/clock/testing"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
)

// TestExpiry decides when a finished EvalRun is deleted, at a time the clock gives: its run's end
// plus the TTL (the operator's, or its annotation's), never for a TTL of 0 or "never", and from
// now when the end is unknown.
func TestExpiry(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	ended := "2026-12-06T02:00:00Z"
	type outcome struct {
		At   time.Time
		Keep bool
	}
	for name, tc := range map[string]struct {
		ttl        time.Duration
		annotation string
		completed  string
		want       outcome
	}{
		"the operator's TTL after the run ended":  {ttl: time.Hour, completed: ended, want: outcome{At: now}},
		"an annotation's TTL over the operator's": {ttl: time.Hour, annotation: "10m", completed: ended, want: outcome{At: now.Add(-50 * time.Minute)}},
		"kept by the annotation":                  {ttl: time.Hour, annotation: "never", completed: ended, want: outcome{Keep: true}},
		"kept by the operator's TTL of 0":         {completed: ended, want: outcome{Keep: true}},
		"an unknown end counts from now":          {ttl: time.Hour, want: outcome{At: now.Add(time.Hour)}},
	} {
		t.Run(name, func(t *testing.T) {
			er := &evalRuns{opts: Options{TTL: tc.ttl, Clock: testingclock.NewFakePassiveClock(now)}}
			obj := &unstructured.Unstructured{Object: map[string]any{}}
			if tc.annotation != "" {
				obj.SetAnnotations(map[string]string{evalsi.AnnotationTTLAfterFinished: tc.annotation})
			}
			at, keep := er.expiry(obj, tc.completed)
			if diff := cmp.Diff(tc.want, outcome{At: at, Keep: keep}); diff != "" {
				t.Errorf("expiry (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFreshRuns reads a followed run only while it is fresh: read within two poll intervals of
// the clock's now.
func TestFreshRuns(t *testing.T) {
	read := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	f := NewFollower()
	f.replace(map[string]followedRun{"p/run-1": {&v1.Run{Id: "run-1"}, read}})
	for name, tc := range map[string]struct {
		id   string
		at   time.Time
		want bool
	}{
		"just read":                {"run-1", read, true},
		"two intervals later":      {"run-1", read.Add(20 * time.Second), true},
		"past two intervals":       {"run-1", read.Add(21 * time.Second), false},
		"a run the follower lacks": {"run-2", read, false},
	} {
		t.Run(name, func(t *testing.T) {
			if _, ok := f.fresh("p", tc.id, 10*time.Second, tc.at); ok != tc.want {
				t.Errorf("fresh at %s: %v, want %v", tc.at.Sub(read), ok, tc.want)
			}
		})
	}
}
