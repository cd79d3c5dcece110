package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	testingclock "k8s.io/utils/clock/testing"
)

// TestNotReadyGauges: objects not Ready count from their Ready condition's last transition (or
// from when they were first seen without one), leave when Ready, deleted or released, and count
// only while their engine holds its shard.
func TestNotReadyGauges(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	clock := testingclock.NewFakePassiveClock(t0.Add(time.Hour))

	object := func(ready string, since time.Time) *unstructured.Unstructured {
		status := map[string]any{}
		if ready != "" {
			status["conditions"] = []any{map[string]any{"type": "Ready", "status": ready, "lastTransitionTime": since.Format(time.RFC3339)}}
		}
		return &unstructured.Unstructured{Object: map[string]any{"status": status}}
	}
	want := func(count int, longest float64) string {
		if count < 0 {
			return ""
		}
		return fmt.Sprintf(`# HELP evalsi_objects_not_ready Objects whose Ready condition is not True, by controller and shard (of the shards this replica holds), as their last reconcile left them.
# TYPE evalsi_objects_not_ready gauge
evalsi_objects_not_ready{controller="evaluator",shard="0/2"} %d
# HELP evalsi_objects_not_ready_longest_seconds How long the object that has been not Ready longest has been so (since its Ready condition's last transition), by controller and shard (of the shards this replica holds); 0 when every object is Ready.
# TYPE evalsi_objects_not_ready_longest_seconds gauge
evalsi_objects_not_ready_longest_seconds{controller="evaluator",shard="0/2"} %g
`, count, longest)
	}
	g := newNotReadyGauges()
	g.clock = clock
	held := true
	n := g.forController("evaluator", "0/2", func() bool { return held })
	n.observe("team-a/broken", object("False", t0))
	n.observe("team-a/fine", object("True", t0))
	n.observe("team-a/new", object("", time.Time{})) // no Ready yet: counted from now, t0+1h
	clock.SetTime(t0.Add(2 * time.Hour))

	for _, step := range []struct {
		name    string
		do      func()
		count   int
		longest float64
	}{
		{"one not Ready for 2h, one for 1h", func() {}, 2, 7200},
		{"the old one Ready again", func() { n.observe("team-a/broken", object("True", clock.Now())) }, 1, 3600},
		{"seen again without Ready: its first sighting kept", func() { n.observe("team-a/new", object("", time.Time{})) }, 1, 3600},
		{"deleted", func() { n.observe("team-a/new", nil) }, 0, 0},
		{"a shard's object not held (a warm engine): no series", func() { n.observe("team-a/warm", object("False", t0)); held = false }, -1, 0},
		{"held again", func() { held = true }, 1, 7200},
		{"the engine stopped: no series", func() { g.release(n) }, -1, 0},
	} {
		step.do()
		if err := testutil.CollectAndCompare(g, strings.NewReader(want(step.count, step.longest))); err != nil {
			t.Errorf("%s: %v", step.name, err)
		}
	}
}

// TestObjectsByPhase: objects with a status.phase (EvalRuns) are counted by namespace and phase
// as their last reconcile left them; one deleted, or of a shard not held, is not.
func TestObjectsByPhase(t *testing.T) {
	run := func(phase string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"phase": phase}}}
	}
	g := newNotReadyGauges()
	held := true
	n := g.forController("evalrun", "0/1", func() bool { return held })
	n.observe("team-a/one", run("Running"))
	n.observe("team-a/two", run("Running"))
	n.observe("team-b/three", run("Pending"))
	n.observe("team-b/three", run("Succeeded")) // its phase moved on
	n.observe("team-a/gone", run("Failed"))
	n.observe("team-a/gone", nil)
	want := `# HELP evalsi_objects_by_phase Objects with a status.phase (EvalRuns), by controller, namespace and phase, as their last reconcile left them (of the shards this replica holds).
# TYPE evalsi_objects_by_phase gauge
evalsi_objects_by_phase{controller="evalrun",namespace="team-a",phase="Running"} 2
evalsi_objects_by_phase{controller="evalrun",namespace="team-b",phase="Succeeded"} 1
`
	if err := testutil.CollectAndCompare(g, strings.NewReader(want), "evalsi_objects_by_phase"); err != nil {
		t.Error(err)
	}
	held = false
	if err := testutil.CollectAndCompare(g, strings.NewReader(""), "evalsi_objects_by_phase"); err != nil {
		t.Errorf("a shard not held: %v", err)
	}
}

// TestFinishedObjectsAreTimed: an object seen to move to a terminal phase is timed once, from its
// creation to its status.completedAt; one found already ended (after a restart or a handover), one
// still running and one seen ended again are not.
func TestFinishedObjectsAreTimed(t *testing.T) {
	created := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	run := func(ns, phase, completed string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"phase": phase}}}
		if completed != "" {
			u.Object["status"].(map[string]any)["completedAt"] = completed
		}
		u.SetNamespace(ns)
		u.SetCreationTimestamp(metav1.NewTime(created))
		return u
	}
	g := newNotReadyGauges()
	n := g.forController("evalrun", "0/1", func() bool { return true })
	n.observe("team-a/one", run("team-a", "Pending", ""))
	n.observe("team-a/one", run("team-a", "Running", ""))
	n.observe("team-a/one", run("team-a", "Succeeded", "2026-12-07T10:05:00Z")) // 300 s
	n.observe("team-a/one", run("team-a", "Succeeded", "2026-12-07T10:05:00Z")) // seen again
	n.observe("team-a/two", run("team-a", "Failed", "2026-12-07T10:01:00Z"))    // found ended
	n.observe("team-b/three", run("team-b", "Running", ""))
	n.observe("team-b/three", run("team-b", "Cancelled", "2026-12-07T10:00:30Z")) // 30 s
	if got := testutil.CollectAndCount(g.finished); got != 2 {
		t.Errorf("%d series, want one per namespace and phase seen to end", got)
	}
	for _, want := range []struct {
		ns, phase string
		sum       float64
	}{{"team-a", "Succeeded", 300}, {"team-b", "Cancelled", 30}} {
		var m dto.Metric
		if err := g.finished.WithLabelValues("evalrun", want.ns, want.phase).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != want.sum {
			t.Errorf("%s %s: %d samples summing %v s, want one of %v s", want.ns, want.phase, h.GetSampleCount(), h.GetSampleSum(), want.sum)
		}
	}
}

// TestEvalsidCallsUnderBothNames: a call to evalsid is counted as evalsi_evalsid_calls_total and,
// for the one release the upgrade notes promise, as evalsi_api_calls_total too, and timed.
func TestEvalsidCallsUnderBothNames(t *testing.T) {
	m := NewMetrics()
	m.ObserveAPICall("CreateRun", "ok", 30*time.Millisecond)
	for name, calls := range map[string]*prometheus.CounterVec{"evalsi_evalsid_calls_total": m.apiCalls, "evalsi_api_calls_total": m.apiCallsOld} {
		if got := testutil.ToFloat64(calls.WithLabelValues("CreateRun", "ok")); got != 1 {
			t.Errorf("%s{CreateRun,ok} = %v, want 1", name, got)
		}
	}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"evalsi_evalsid_calls_total", "evalsi_api_calls_total", "evalsi_evalsid_call_duration_seconds"} {
		if !names[want] {
			t.Errorf("the registry lacks %s", want)
		}
	}
}
