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
// engine runs again (a Lease lost and taken back). Counters and histograms add up across them as
// they are. The gauges do not: each queue keeps its own (queueGauges), and a name's series is
// their sum (depth, seconds of unfinished work) or their maximum (longest-running processor) over
// the queues not yet released. A stopped queue's leftover items and last readings would otherwise
// stay in the series for the life of the process.
type queueMetrics struct {
	adds, retries         *prometheus.CounterVec
	latency, workDuration *prometheus.HistogramVec
	gauges                *queueGauges
}

func newQueueMetrics(reg *prometheus.Registry) queueMetrics {
	q := queueMetrics{
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsi_workqueue_adds_total", Help: "Adds handled by the work queue.",
		}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsi_workqueue_retries_total", Help: "Retries handled by the work queue.",
		}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "evalsi_workqueue_queue_duration_seconds", Help: "How long an item waits in the queue.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12),
		}, []string{"name"}),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "evalsi_workqueue_work_duration_seconds", Help: "How long processing an item takes.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12),
		}, []string{"name"}),
		gauges: &queueGauges{
			depth: prometheus.NewDesc("evalsi_workqueue_depth",
				"Current depth of the work queue (of every running engine's queue of that name).", []string{"name"}, nil),
			unfinished: prometheus.NewDesc("evalsi_workqueue_unfinished_work_seconds",
				"Seconds of work in progress not yet observed by work_duration.", []string{"name"}, nil),
			longest: prometheus.NewDesc("evalsi_workqueue_longest_running_processor_seconds",
				"Seconds the longest-running processor has been running.", []string{"name"}, nil),
			queues: map[*queueGauge]struct{}{},
			names:  map[string]bool{},
		},
	}
	reg.MustRegister(q.adds, q.retries, q.latency, q.workDuration, q.gauges)
	return q
}

// forQueue returns the workqueue.MetricsProvider of a new queue named name (a kind's
// controller); release its gauges once the queue has shut down.
func (q queueMetrics) forQueue(name string) *queueGauge {
	g := &queueGauge{queueMetrics: q, name: name}
	q.gauges.mu.Lock()
	q.gauges.queues[g] = struct{}{}
	q.gauges.names[name] = true
	q.gauges.mu.Unlock()
	return g
}

// queueGauge is the metrics provider of one queue: the shared counters and histograms, and
// gauges of its own.
type queueGauge struct {
	queueMetrics
	name                       string
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
	return g.adds.WithLabelValues(name)
}
func (g *queueGauge) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return g.latency.WithLabelValues(name)
}
func (g *queueGauge) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return g.workDuration.WithLabelValues(name)
}
func (g *queueGauge) NewRetriesMetric(name string) workqueue.CounterMetric {
	return g.retries.WithLabelValues(name)
}

// queueGauges collects the gauges of the queues not yet released, by name. A name once given
// stays in the series, at 0 while no queue of it runs (a replica that holds no shard).
type queueGauges struct {
	depth, unfinished, longest *prometheus.Desc
	mu                         sync.Mutex
	queues                     map[*queueGauge]struct{}
	names                      map[string]bool
}

func (c *queueGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.unfinished
	ch <- c.longest
}

func (c *queueGauges) Collect(ch chan<- prometheus.Metric) {
	type values struct{ depth, unfinished, longest float64 }
	byName := map[string]*values{}
	c.mu.Lock()
	for name := range c.names {
		byName[name] = &values{}
	}
	for g := range c.queues {
		v := byName[g.name]
		v.depth += g.depth.value()
		v.unfinished += g.unfinished.value()
		v.longest = max(v.longest, g.longest.value())
	}
	c.mu.Unlock()
	for name, v := range byName {
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, v.depth, name)
		ch <- prometheus.MustNewConstMetric(c.unfinished, prometheus.GaugeValue, v.unfinished, name)
		ch <- prometheus.MustNewConstMetric(c.longest, prometheus.GaugeValue, v.longest, name)
	}
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
