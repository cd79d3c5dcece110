package engine

import (
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// A replica's queues of one kind (one per shard engine, and a new one each time an engine runs
// again) make one series: depth and unfinished work add up, the longest-running processor is the
// longest; a queue that shut down and was released no longer counts, with what it still held.
func TestQueueGaugesCountRunningQueues(t *testing.T) {
	m := NewMetrics()
	// The depth, through client-go's queues.
	newQueue := func() (workqueue.TypedRateLimitingInterface[string], *queueGauge) {
		g := m.queues.forQueue("evaluator")
		q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "evaluator", MetricsProvider: g})
		t.Cleanup(q.ShutDown)
		return q, g
	}
	q1, g1 := newQueue()
	q2, g2 := newQueue()
	for _, k := range []string{"a", "b", "c"} {
		q1.Add(k)
	}
	q2.Add("d")
	q2.Add("e")
	if _, shutdown := q1.Get(); shutdown {
		t.Fatal("q1 shut down")
	}
	depth := func(step string, want float64) {
		t.Helper()
		if got, ok := gaugeValueOf(t, m, "evalsi_workqueue_depth", "evaluator"); !ok || got != want {
			t.Errorf("%s: depth %v (present %v), want %v", step, got, ok, want)
		}
	}
	depth("two queues", 4)
	q2.ShutDown()
	g2.release()
	depth("the second shut down with two items", 2)
	q1.ShutDown()
	g1.release()
	depth("none runs", 0)

	// The gauges a queue sets every half second, set here (no queue runs under this name).
	s1, s2 := m.queues.forQueue("checkpointserver"), m.queues.forQueue("checkpointserver")
	s1.NewUnfinishedWorkSecondsMetric("checkpointserver").Set(1.5)
	s1.NewLongestRunningProcessorSecondsMetric("checkpointserver").Set(4)
	s2.NewUnfinishedWorkSecondsMetric("checkpointserver").Set(2)
	s2.NewLongestRunningProcessorSecondsMetric("checkpointserver").Set(7)
	set := func(step string, unfinished, longest float64) {
		t.Helper()
		for metric, want := range map[string]float64{
			"evalsi_workqueue_unfinished_work_seconds":           unfinished,
			"evalsi_workqueue_longest_running_processor_seconds": longest,
		} {
			if got, ok := gaugeValueOf(t, m, metric, "checkpointserver"); !ok || got != want {
				t.Errorf("%s: %s %v (present %v), want %v", step, metric, got, ok, want)
			}
		}
	}
	set("two queues", 3.5, 7)
	s2.release()
	set("one released", 1.5, 4)
	s1.release()
	set("none runs", 0, 0)
}

// gaugeValueOf returns the gauge metric{name=name} of m's registry, and whether it is there.
func gaugeValueOf(t *testing.T, m *Metrics, metric, name string) (float64, bool) {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == name {
					return s.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}
