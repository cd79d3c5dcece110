package engine

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"

	"evals.si/operator/evalsi"
)

// notReadyObjects is, for one controller of one engine, since when each object it reconciled
// last had a Ready condition other than True: the condition's lastTransitionTime, which the
// object keeps across restarts and handovers, or when it was first seen without one. An object
// found Ready, deleted or of another shard leaves it. A warm engine keeps its objects too, and
// they are counted once it holds its shard (held).
type notReadyObjects struct {
	controller string
	shard      string
	clock      clock.PassiveClock
	held       func() bool
	mu         sync.Mutex
	since      map[string]time.Time
	// phases are the status.phase of the objects that have one (EvalRuns), by key.
	phases map[string]string
	// finished times an object whose phase this controller saw move to a terminal one (Succeeded,
	// Failed, Cancelled): from its creation to its status.completedAt.
	finished *prometheus.HistogramVec
}

// observe records obj's Ready condition as its status now holds it; obj nil forgets key.
func (n *notReadyObjects) observe(key string, obj *unstructured.Unstructured) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if obj == nil {
		delete(n.since, key)
		delete(n.phases, key)
		return
	}
	status, _, _ := unstructured.NestedMap(obj.Object, "status")
	if phase, _ := status["phase"].(string); phase != "" {
		// Seen to end here, not found ended (after a restart or a handover): counted once.
		if prev, seen := n.phases[key]; seen && !evalsi.TerminalPhase(prev) && evalsi.TerminalPhase(phase) {
			n.observeFinished(obj, phase, status)
		}
		n.phases[key] = phase
	} else {
		delete(n.phases, key)
	}
	ready := ReadyOf(status)
	if ready["status"] == "True" {
		delete(n.since, key)
		return
	}
	if s, _ := ready["lastTransitionTime"].(string); s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			n.since[key] = t
			return
		}
	}
	if _, ok := n.since[key]; !ok {
		n.since[key] = n.clock.Now()
	}
}

// observeFinished times obj, which has just ended in phase, from its creation to its
// status.completedAt (now, when the status names no time).
func (n *notReadyObjects) observeFinished(obj *unstructured.Unstructured, phase string, status map[string]any) {
	end := n.clock.Now()
	if s, _ := status["completedAt"].(string); s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			end = t
		}
	}
	took := end.Sub(obj.GetCreationTimestamp().Time)
	n.finished.WithLabelValues(n.controller, obj.GetNamespace(), phase).Observe(max(took, 0).Seconds())
}

// notReadyGauges collects, by controller and shard, how many objects are not Ready and for how
// long the oldest has not been, over the controllers of the engines that hold their shard (a
// replica runs one for each shard it holds or warms); a controller's objects leave the series
// when its engine stops, so that a shard is counted by its holder alone. A held shard whose
// objects are all Ready is in the series at 0.
type notReadyGauges struct {
	count, longest, phases *prometheus.Desc
	// finished is evalsi_objects_finished_duration_seconds (notReadyObjects.observeFinished).
	finished *prometheus.HistogramVec
	mu       sync.Mutex
	sets     map[*notReadyObjects]struct{}
	// clock is the time the gauges are read at (clock.RealClock but in tests).
	clock clock.PassiveClock
}

func newNotReadyGauges() *notReadyGauges {
	return &notReadyGauges{
		count: prometheus.NewDesc("evalsi_objects_not_ready",
			"Objects whose Ready condition is not True, by controller and shard (of the shards this replica holds), as their last reconcile left them.", []string{"controller", "shard"}, nil),
		longest: prometheus.NewDesc("evalsi_objects_not_ready_longest_seconds",
			"How long the object that has been not Ready longest has been so (since its Ready condition's last transition), by controller and shard (of the shards this replica holds); 0 when every object is Ready.", []string{"controller", "shard"}, nil),
		phases: prometheus.NewDesc("evalsi_objects_by_phase",
			"Objects with a status.phase (EvalRuns), by controller, namespace and phase, as their last reconcile left them (of the shards this replica holds).", []string{"controller", "namespace", "phase"}, nil),
		finished: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "evalsi_objects_finished_duration_seconds",
			Help: "How long objects with a status.phase (EvalRuns) took from their creation to their status.completedAt, by controller, namespace and the phase they ended in; an object is counted by the replica that saw it end.",
			// From ten seconds to about four days.
			Buckets: prometheus.ExponentialBuckets(10, 2, 16),
		}, []string{"controller", "namespace", "phase"}),
		sets:  map[*notReadyObjects]struct{}{},
		clock: clock.RealClock{},
	}
}

// forController returns the set of a new controller's objects, counted while held says its
// engine holds its shard; release it when the controller has stopped.
func (g *notReadyGauges) forController(name, shard string, held func() bool) *notReadyObjects {
	n := &notReadyObjects{controller: name, shard: shard, clock: g.clock, held: held, since: map[string]time.Time{}, phases: map[string]string{}, finished: g.finished}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sets[n] = struct{}{}
	return n
}

// release drops a stopped controller's objects from the series.
func (g *notReadyGauges) release(n *notReadyObjects) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.sets, n)
}

func (g *notReadyGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.count
	ch <- g.longest
	ch <- g.phases
}

func (g *notReadyGauges) Collect(ch chan<- prometheus.Metric) {
	type values struct {
		count  int
		oldest time.Time
	}
	type key struct{ controller, shard string }
	type phaseKey struct{ controller, namespace, phase string }
	by := map[key]*values{}
	phases := map[phaseKey]int{}
	g.mu.Lock()
	for n := range g.sets {
		if !n.held() {
			continue
		}
		v := entry(by, key{n.controller, n.shard})
		n.mu.Lock()
		for k, phase := range n.phases {
			namespace, _, namespaced := strings.Cut(k, "/")
			if !namespaced {
				namespace = ""
			}
			phases[phaseKey{n.controller, namespace, phase}]++
		}
		v.count += len(n.since)
		for _, t := range n.since {
			if v.oldest.IsZero() || t.Before(v.oldest) {
				v.oldest = t
			}
		}
		n.mu.Unlock()
	}
	g.mu.Unlock()
	at := g.clock.Now()
	for k, v := range by {
		longest := 0.0
		if !v.oldest.IsZero() {
			longest = max(at.Sub(v.oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(g.count, prometheus.GaugeValue, float64(v.count), k.controller, k.shard)
		ch <- prometheus.MustNewConstMetric(g.longest, prometheus.GaugeValue, longest, k.controller, k.shard)
	}
	for k, count := range phases {
		ch <- prometheus.MustNewConstMetric(g.phases, prometheus.GaugeValue, float64(count), k.controller, k.namespace, k.phase)
	}
}
