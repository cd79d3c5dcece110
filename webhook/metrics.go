package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the webhook's: reviews shed, in flight, and how long the served ones took, and
// where the answers about references came from.
type Metrics struct {
	Registry      *prometheus.Registry
	shed          prometheus.Counter
	inFlight      prometheus.Gauge
	duration      prometheus.Histogram
	accessAnswers *prometheus.CounterVec
}

// NewMetrics returns the webhook's metrics in a registry of their own, with the Go and process
// collectors (its CPU and memory, on its dashboard).
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "evalsi_webhook_shed_total",
			Help: "Admission reviews refused with 429 because the webhook was at capacity.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "evalsi_webhook_in_flight",
			Help: "Admission reviews being served.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "evalsi_webhook_duration_seconds",
			Help:    "Time an admission review took to serve, once it had a slot.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		accessAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsi_webhook_access_answers_total",
			Help: "Answers about a reference a workload object's writer may use, by source: kept (cached), shared (asked by a review in flight) or asked of the API server.",
		}, []string{"source"}),
	}
	m.Registry.MustRegister(m.shed, m.inFlight, m.duration, m.accessAnswers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
