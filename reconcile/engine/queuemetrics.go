package engine

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// queueMetrics are the metrics of the work queues. A replica runs an engine for each shard it
// holds or warms, each with a queue per kind under the kind's name, and a new queue each time an
// engine runs again (a Lease lost and taken back); every series is labelled with the queue's
// shard. Counters and histograms count as they are, until the shard's engine stops
// (Metrics.forgetShard). The gauges are each queue's own (queueGauges), collected only from the
// queues of shards the replica holds and not yet released: a warm shard's queue, or a stopped
// one's leftover items and last readings, would otherwise show as this replica's work.
type queueMetrics struct {
	adds, retries         *prometheus.CounterVec
	latency, workDuration *prometheus.HistogramVec
	gauges                *queueGauges
}

func newQueueMetrics(reg *prometheus.Registry) queueMetrics {
	q := queueMetrics{
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsi_workqueue_adds_total", Help: "Adds handled by the work queue.",
		}, []string{"name", "shard"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsi_workqueue_retries_total", Help: "Retries handled by the work queue.",
		}, []string{"name", "shard"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "evalsi_workqueue_queue_duration_seconds", Help: "How long an item waits in the queue.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12),
		}, []string{"name", "shard"}),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "evalsi_workqueue_work_duration_seconds", Help: "How long processing an item takes.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12),
		}, []string{"name", "shard"}),
		gauges: &queueGauges{
			depth: prometheus.NewDesc("evalsi_workqueue_depth",
				"Current depth of the work queue, by name and shard (of the shards this replica holds).", []string{"name", "shard"}, nil),
			unfinished: prometheus.NewDesc("evalsi_workqueue_unfinished_work_seconds",
				"Seconds of work in progress not yet observed by work_duration, by name and shard (of the shards this replica holds).", []string{"name", "shard"}, nil),
			longest: prometheus.NewDesc("evalsi_workqueue_longest_running_processor_seconds",
				"Seconds the longest-running processor has been running, by name and shard (of the shards this replica holds).", []string{"name", "shard"}, nil),
			queues: map[*queueGauge]struct{}{},
		},
	}
	reg.MustRegister(q.adds, q.retries, q.latency, q.workDuration, q.gauges)
	return q
}

// forQueue returns the workqueue.MetricsProvider of a new queue named name (a kind's
// controller) of shard's engine, whose gauges count while held says the replica holds the shard;
// release them once the queue has shut down.
func (q queueMetrics) forQueue(name, shard string, held func() bool) *queueGauge {
	g := &queueGauge{queueMetrics: q, name: name, shard: shard, held: held}
	q.gauges.mu.Lock()
	q.gauges.queues[g] = struct{}{}
	q.gauges.mu.Unlock()
	return g
}

// forgetShard drops the counters and histograms of a shard whose engine stopped.
func (q queueMetrics) forgetShard(only prometheus.Labels) {
	q.adds.DeletePartialMatch(only)
	q.retries.DeletePartialMatch(only)
	q.latency.DeletePartialMatch(only)
	q.workDuration.DeletePartialMatch(only)
}

// queueGauge is the metrics provider of one queue: the shared counters and histograms, and
// gauges of its own.
type queueGauge struct {
	queueMetrics
	name, shard                string
	held                       func() bool
	depth, unfinished, longest gaugeValue
}

// release drops the queue's gauges from the series: call it once the queue has shut down (no
// Add counts after that, and the loop that sets its gauges has ended).
func (g *queueGauge) release() {
	g.gauges.mu.Lock()
	delete(g.gauges.queues, g)
	g.gauges.mu.Unlock()
}

// The gauges' constructors are given the queue's name, which forQueue already has.

func (g *queueGauge) NewDepthMetric(string) workqueue.GaugeMetric {
	return &g.depth
}
func (g *queueGauge) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return &g.unfinished
}
func (g *queueGauge) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return &g.longest
}
func (g *queueGauge) NewAddsMetric(name string) workqueue.CounterMetric {
	return g.adds.WithLabelValues(name, g.shard)
}
func (g *queueGauge) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return g.latency.WithLabelValues(name, g.shard)
}
func (g *queueGauge) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return g.workDuration.WithLabelValues(name, g.shard)
}
func (g *queueGauge) NewRetriesMetric(name string) workqueue.CounterMetric {
	return g.retries.WithLabelValues(name, g.shard)
}

// queueGauges collects the gauges of the queues not yet released whose shard the replica holds,
// by name and shard.
type queueGauges struct {
	depth, unfinished, longest *prometheus.Desc
	mu                         sync.Mutex
	queues                     map[*queueGauge]struct{}
}

func (c *queueGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.unfinished
	ch <- c.longest
}

func (c *queueGauges) Collect(ch chan<- prometheus.Metric) {
	// Two queues of one name and shard run together only while a stopping engine's queue is not
	// released yet: their depths add up, the longest processor is the longer one.
	type key struct{ name, shard string }
	type values struct{ depth, unfinished, longest float64 }
	by := map[key]*values{}
	c.mu.Lock()
	for g := range c.queues {
		if !g.held() {
			continue
		}
		v := entry(by, key{g.name, g.shard})
		v.depth += g.depth.value()
		v.unfinished += g.unfinished.value()
		v.longest = max(v.longest, g.longest.value())
	}
	c.mu.Unlock()
	for k, v := range by {
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, v.depth, k.name, k.shard)
		ch <- prometheus.MustNewConstMetric(c.unfinished, prometheus.GaugeValue, v.unfinished, k.name, k.shard)
		ch <- prometheus.MustNewConstMetric(c.longest, prometheus.GaugeValue, v.longest, k.name, k.shard)
	}
}

// entry returns m's value of k, adding a zero one first when there is none.
func entry[K comparable, V any](m map[K]*V, k K) *V {
	v, ok := m[k]
	if !ok {
		v = new(V)
		m[k] = v
	}
	return v
}

// gaugeValue is a float64 gauge that one queue sets, and Collect reads.
type gaugeValue struct{ bits atomic.Uint64 }

func (v *gaugeValue) value() float64 { return math.Float64frombits(v.bits.Load()) }
func (v *gaugeValue) Set(f float64)  { v.bits.Store(math.Float64bits(f)) }
func (v *gaugeValue) Inc()           { v.add(1) }
func (v *gaugeValue) Dec()           { v.add(-1) }

func (v *gaugeValue) add(d float64) {
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}
