package engine

import (
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// A replica's queues of one kind make one series per shard it holds: two queues of one shard (a
// stopping engine's, not released yet, and the new one's) add up their depth and unfinished work,
// the longest-running processor is the longest; a queue of another shard is a series of its own;
// a warm shard's queue (not held) and a queue that shut down and was released make none.
func TestQueueGaugesCountHeldQueues(t *testing.T) {
	m := NewMetrics()
	held := map[string]bool{"0/2": true, "1/2": true}
	// The depth, through client-go's queues.
	newQueue := func(shard string) (workqueue.TypedRateLimitingInterface[string], *queueGauge) {
		g := m.queues.forQueue("evaluator", shard, func() bool { return held[shard] })
		q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "evaluator", MetricsProvider: g})
		t.Cleanup(q.ShutDown)
		return q, g
	}
	q1, g1 := newQueue("0/2")
	q2, g2 := newQueue("0/2")
	q3, _ := newQueue("1/2")
	for _, k := range []string{"a", "b", "c"} {
		q1.Add(k)
	}
	q2.Add("d")
	q2.Add("e")
	q3.Add("f")
	if _, shutdown := q1.Get(); shutdown {
		t.Fatal("q1 shut down")
	}
	depth := func(step, shard string, want float64, present bool) {
		t.Helper()
		if got, ok := gaugeValueOf(t, m, "evalsi_workqueue_depth", "evaluator", shard); ok != present || got != want {
			t.Errorf("%s: shard %s depth %v (present %v), want %v (present %v)", step, shard, got, ok, want, present)
		}
	}
	depth("two queues of a shard", "0/2", 4, true)
	depth("another shard's queue", "1/2", 1, true)
	held["1/2"] = false
	depth("a shard warmed, not held", "1/2", 0, false)
	q2.ShutDown()
	g2.release()
	depth("the second shut down with two items", "0/2", 2, true)
	q1.ShutDown()
	g1.release()
	depth("none runs", "0/2", 0, false)

	// The gauges a queue sets every half second, set here (no queue runs under this name).
	s1, s2 := m.queues.forQueue("checkpointserver", "0/1", func() bool { return true }), m.queues.forQueue("checkpointserver", "0/1", func() bool { return true })
	s1.NewUnfinishedWorkSecondsMetric("checkpointserver").Set(1.5)
	s1.NewLongestRunningProcessorSecondsMetric("checkpointserver").Set(4)
	s2.NewUnfinishedWorkSecondsMetric("checkpointserver").Set(2)
	s2.NewLongestRunningProcessorSecondsMetric("checkpointserver").Set(7)
	set := func(step string, unfinished, longest float64, present bool) {
		t.Helper()
		for metric, want := range map[string]float64{
			"evalsi_workqueue_unfinished_work_seconds":           unfinished,
			"evalsi_workqueue_longest_running_processor_seconds": longest,
		} {
			if got, ok := gaugeValueOf(t, m, metric, "checkpointserver", "0/1"); ok != present || got != want {
				t.Errorf("%s: %s %v (present %v), want %v (present %v)", step, metric, got, ok, want, present)
			}
		}
	}
	set("two queues", 3.5, 7, true)
	s2.release()
	set("one released", 1.5, 4, true)
	s1.release()
	set("none runs", 0, 0, false)
}

// A stopped engine's shard leaves the counters: its holder counts it from now on.
func TestForgetShardDropsItsSeries(t *testing.T) {
	m := NewMetrics()
	m.observeReconcile("evaluator", "0/2", "success", 0)
	m.observeReconcile("evaluator", "1/2", "success", 0)
	q := m.queues.forQueue("evaluator", "0/2", func() bool { return true })
	q.NewAddsMetric("evaluator").Inc()
	q.release() // as the engine's controllers do before it stops
	m.forgetShard("0/2")
	if got := m.ReconcileCount("evaluator", "success"); got != 1 {
		t.Errorf("reconciles after the first shard was forgotten: %v, want the second's 1", got)
	}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "shard" && l.GetValue() == "0/2" {
					t.Errorf("%s still has a series of the forgotten shard", f.GetName())
				}
			}
		}
	}
}

// gaugeValueOf returns the gauge metric{name=name, shard=shard} of m's registry, and whether it
// is there.
func gaugeValueOf(t *testing.T, m *Metrics, metric, name, shard string) (float64, bool) {
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
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["name"] == name && labels["shard"] == shard {
				return s.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}
