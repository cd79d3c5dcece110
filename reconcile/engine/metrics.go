package engine

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"evals.si/operator/evalsi"
)

// Metrics are the engine's Prometheus metrics, in a registry of their own. The engines of one
// replica's shards share them, and label what each records by its shard ("0/3"; "0/1" when the
// operator does not shard): the gauges count only the shards the replica holds, and the series
// of a shard go when its engine stops (forgetShard), so that a shard's series come from its
// holder, not from every replica that once held or warmed it.
type Metrics struct {
	Registry *prometheus.Registry

	reconciles *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	requests   *prometheus.CounterVec
	apiCalls   *prometheus.CounterVec
	// apiCallsOld is apiCalls under its name before evalsi_evalsid_calls_total, kept one release.
	apiCallsOld *prometheus.CounterVec
	apiLatency  *prometheus.HistogramVec
	queues      queueMetrics
	notReady    *notReadyGauges
	// server is 1 for the server's Kubernetes version when its minor is the supported one, else 0.
	server *prometheus.GaugeVec
	// requeuedOnAnswer counts the objects put back on their queue at once because the external
	// API answered again after they had waited on it (waiters.go).
	requeuedOnAnswer prometheus.Counter
	// requeuedOnAPIServer counts the objects put back on their queue at once because the API
	// server answered again after they had failed on its absence (cached/apigate.go).
	requeuedOnAPIServer prometheus.Counter
	// unreachableCalls counts the informers' lists and watches that found the API server
	// unreachable: held by the gate until it answered (cached/apigate.go), or failed to the informer
	// when the engine stopped meanwhile. A failed one is one a reflector backs off on.
	unreachableCalls *prometheus.CounterVec
	// informerErrors counts the errors the informers' reflectors saw (watchErrors).
	informerErrors *prometheus.CounterVec
}

// NewMetrics returns the engine's metrics, registered with the Go and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsi_reconcile_total",
			Help: "Reconciles by controller, shard and result (success, requeue, conflict, error, terminal; held: a warm shard's, which waits to write).",
		}, []string{"controller", "shard", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "evalsi_reconcile_duration_seconds",
			Help:    "Time one reconcile took, by controller and shard.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"controller", "shard"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsi_kube_requests_total",
			Help: "Requests to the Kubernetes API server by verb, resource, status code and the shard of the engine that sent them.",
		}, []string{"verb", "resource", "code", "shard"}),
		apiCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsi_evalsid_calls_total",
			Help: "Calls to evalsid by method and result code.",
		}, []string{"method", "code"}),
		apiCallsOld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evalsi_api_calls_total",
			Help: "Deprecated: evalsi_evalsid_calls_total, under its old name for one release.",
		}, []string{"method", "code"}),
		apiLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "evalsi_evalsid_call_duration_seconds",
			Help:    "How long calls to evalsid took, answered or not, by method.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"method"}),
	}
	m.server = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "evalsi_kubernetes_version_supported",
		Help: "1 when the API server's Kubernetes minor (label version) is the one the operator supports, else 0.",
	}, []string{"version", "supported_minor"})
	m.requeuedOnAnswer = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "evalsi_external_requeued_on_answer_total",
		Help: "Objects that had waited on evalsid, put back on their queue at once when it answered again.",
	})
	m.requeuedOnAPIServer = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "evalsi_kube_requeued_on_return_total",
		Help: "Objects whose reconcile failed while the API server could not be reached, put back on their queue at once when it answered again.",
	})
	m.unreachableCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "evalsi_kube_unreachable_calls_total",
		Help: "Informer lists and watches that found the API server unreachable, by outcome: held until it answered, or failed (the engine stopped first).",
	}, []string{"outcome"})
	m.informerErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "evalsi_informer_errors_total",
		Help: "Errors the informers' lists and watches returned to their reflectors, by resource: each makes its informer wait a backoff before it lists or watches again.",
	}, []string{"resource"})
	m.queues = newQueueMetrics(m.Registry)
	m.notReady = newNotReadyGauges()
	m.Registry.MustRegister(m.notReady, m.notReady.finished, m.reconciles, m.duration, m.requests, m.apiCalls, m.apiCallsOld, m.apiLatency, m.server, m.requeuedOnAnswer, m.requeuedOnAPIServer, m.unreachableCalls, m.informerErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// setServerVersion records the server's version and whether its minor is supported; a version
// seen before (an upgraded server) is dropped.
func (m *Metrics) setServerVersion(v string, supported bool) {
	m.server.Reset()
	value := 0.0
	if supported {
		value = 1
	}
	m.server.WithLabelValues(v, evalsi.KubernetesMinor).Set(value)
}

func (m *Metrics) observeReconcile(controller, shard, result string, d time.Duration) {
	m.reconciles.WithLabelValues(controller, shard, result).Inc()
	m.duration.WithLabelValues(controller, shard).Observe(d.Seconds())
}

// forgetShard drops the series of shard: its engine stopped, and another replica (or a later
// engine of this one) counts it from now on.
func (m *Metrics) forgetShard(shard string) {
	only := prometheus.Labels{"shard": shard}
	m.reconciles.DeletePartialMatch(only)
	m.duration.DeletePartialMatch(only)
	m.requests.DeletePartialMatch(only)
	m.queues.forgetShard(only)
}

// KubeRequests returns the count of requests with verb to resource ("" for any) so far (tests
// use it to prove that steady state writes nothing).
func (m *Metrics) KubeRequests(verb, resource string) float64 {
	match := map[string]string{"verb": verb}
	if resource != "" {
		match["resource"] = resource
	}
	return counterSum(m.requests, match)
}

// ReconcileCount returns the reconciles of controller that ended with result.
func (m *Metrics) ReconcileCount(controller, result string) float64 {
	return counterSum(m.reconciles, map[string]string{"controller": controller, "result": result})
}

// counterSum adds up the counters of vec whose labels include match.
func counterSum(vec *prometheus.CounterVec, match map[string]string) float64 {
	var total float64
	ch := make(chan prometheus.Metric, 64)
	go func() { vec.Collect(ch); close(ch) }()
	for metric := range ch {
		var d dto.Metric
		if err := metric.Write(&d); err != nil {
			continue
		}
		n := 0
		for _, l := range d.GetLabel() {
			if v, ok := match[l.GetName()]; ok && v == l.GetValue() {
				n++
			}
		}
		if n == len(match) {
			total += d.GetCounter().GetValue()
		}
	}
	return total
}

// RequeuedOnAnswer returns how many objects were put back on their queue because the external
// API answered again.
func (m *Metrics) RequeuedOnAnswer() float64 {
	var d dto.Metric
	if err := m.requeuedOnAnswer.Write(&d); err != nil {
		return 0
	}
	return d.GetCounter().GetValue()
}

// ObserveAPICall counts a call of an external API by method and result code, and how long it took.
func (m *Metrics) ObserveAPICall(method, code string, took time.Duration) {
	m.apiCalls.WithLabelValues(method, code).Inc()
	m.apiCallsOld.WithLabelValues(method, code).Inc()
	m.apiLatency.WithLabelValues(method).Observe(took.Seconds())
}

// countRequests returns the wrapper of the transport of shard's engine that counts its requests
// by verb, resource and code.
func (m *Metrics) countRequests(shard string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper { return m.countRequestsOf(shard, rt) }
}

func (m *Metrics) countRequestsOf(shard string, rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		verb := req.Method
		if req.URL.Query().Get("watch") == "true" {
			verb = "WATCH"
		}
		m.requests.WithLabelValues(verb, resourceOf(req.URL.Path), code, shard).Inc()
		return resp, err
	})
}

// resourceOf returns the resource (and subresource) a request path names:
// /apis/apps/v1/namespaces/x/deployments/y/status is "deployments/status".
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "discovery"
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		if len(parts) == 2 {
			return "namespaces"
		}
		parts = parts[2:]
	}
	if len(parts) >= 3 {
		return parts[0] + "/" + parts[2]
	}
	if len(parts) == 0 {
		return "discovery"
	}
	return parts[0]
}
