package engine

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"

	"evals.si/operator/evalsi"
	"evals.si/operator/shard"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// eventLines is how many broadcasters write the engine's Events side by side. A broadcaster
// writes its Events one at a time, each a request that waits for the API server; while a
// converge kept the server busy, the Ready Events of 500 pools waited in that one line, about
// 195 of them for up to a minute after the status they report. Every Event of an object goes
// through the same line, whose correlator aggregates and counts its repeats as one did.
const eventLines = 8

// eventKeys bounds each of a line's three caches (similar events aggregated, repeats counted,
// spam filtered per object), which keep a key and a record per distinct event: at client-go's
// 4,096 they grew with every pool that had an event (a heap profile held about 1.5 MB more of
// them at 2,000 pools than at 500). A repeat of an event pushed out by over a thousand newer
// ones of its line is recorded as a new Event instead of counted.
const eventKeys = 1024 / eventLines * 2

// lineRecorder records each object's Events through the line its UID hashes to.
type lineRecorder []record.EventRecorder

// Events writes the Events of a process's engines through one set of eventLines broadcasters,
// however many shards the process holds: an engine per shard each with its own broadcasters kept
// eight goroutines and three caches per shard, and a handover started and flushed them. Each
// Event is written by the client of the engine of its object's shard, under that engine's context
// (the shard's tenure, and whether the engine may write yet), so that it is fenced and counted as
// the engine's other writes are. An Event of an object whose shard no engine of the process holds
// any more is dropped (also those its engine recorded as it stopped, unless it was the last to
// leave): its shard's new holder reports on the object now.
type Events struct {
	namespace string

	mu sync.Mutex
	// writers are the engines that joined, newest last.
	writers []*eventWriter
	lines   lineRecorder
	stop    func()
	// log is the broadcasters' logger, the first joiner's.
	log logr.Logger
	// starts counts how often the broadcasters were started; dropped the Events of shards no
	// engine held.
	starts  int
	dropped atomic.Int64
}

// eventWriter is an engine's way of writing its shard's Events.
type eventWriter struct {
	shard shard.Shard
	sink  eventSink
}

// NewEvents returns the Events of a process whose engines record Events in namespace ("" for each
// object's own). It starts nothing until an engine joins.
func NewEvents(namespace string) *Events { return &Events{namespace: namespace} }

// join has the engine of s write its shard's Events with kube under ctx, until the returned
// function is called. The first engine to join starts the broadcasters, which log through its
// context's logger (klog's, which the operator routes into its own); the last to leave flushes
// and stops them.
func (ev *Events) join(ctx context.Context, s shard.Shard, kube kubernetes.Interface) (record.EventRecorder, func()) {
	w := &eventWriter{shard: s, sink: eventSink{ctx: context.WithoutCancel(ctx), events: kube.CoreV1().Events(ev.namespace)}}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.writers = append(ev.writers, w)
	if ev.lines == nil {
		ev.log = logr.New(quietTenureEnds{klog.FromContext(ctx).GetSink()})
		ev.lines, ev.stop = startEventLines(klog.NewContext(context.WithoutCancel(ctx), ev.log), eventRouter{ev})
		ev.starts++
	}
	return ev.lines, func() {
		ev.mu.Lock()
		var stop func()
		if len(ev.writers) == 1 {
			// The last one: the Events it recorded as it stopped are written before it leaves.
			stop, ev.lines, ev.stop = ev.stop, nil, nil
		}
		ev.mu.Unlock()
		if stop != nil {
			stop()
		}
		ev.mu.Lock()
		ev.writers = slices.DeleteFunc(ev.writers, func(o *eventWriter) bool { return o == w })
		ev.mu.Unlock()
	}
}

// writerOf returns the sink of the engine that holds the shard of e's object, the one that joined
// last if two do (a warm engine started while the one it replaces stops); false when none does.
func (ev *Events) writerOf(e *corev1.Event) (eventSink, bool) {
	uid := string(e.InvolvedObject.UID)
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, w := range slices.Backward(ev.writers) {
		if w.shard.Contains(uid) {
			return w.sink, true
		}
	}
	return eventSink{}, false
}

// startEventLines starts eventLines broadcasters writing to sink, logging through ctx's logger,
// and returns their recorder and a function that flushes and stops them.
func startEventLines(ctx context.Context, sink record.EventSink) (lineRecorder, func()) {
	lines := make(lineRecorder, eventLines)
	broadcasters := make([]record.EventBroadcaster, eventLines)
	for i := range lines {
		b := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: eventKeys}))
		b.StartRecordingToSink(sink)
		lines[i] = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: evalsi.FieldManager})
		broadcasters[i] = b
	}
	return lines, func() {
		for _, b := range broadcasters {
			b.Shutdown()
		}
	}
}

// eventRouter is the broadcasters' sink: it writes each Event through the sink of the engine that
// holds its object's shard.
type eventRouter struct{ ev *Events }

// Create writes a new Event.
func (r eventRouter) Create(e *corev1.Event) (*corev1.Event, error) {
	if w, ok := r.ev.writerOf(e); ok {
		return w.Create(e)
	}
	return r.drop(e)
}

// Update replaces an Event.
func (r eventRouter) Update(e *corev1.Event) (*corev1.Event, error) {
	if w, ok := r.ev.writerOf(e); ok {
		return w.Update(e)
	}
	return r.drop(e)
}

// Patch counts a repeat of an Event.
func (r eventRouter) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if w, ok := r.ev.writerOf(e); ok {
		return w.Patch(e, data)
	}
	return r.drop(e)
}

// drop drops e, whose object's shard no engine of this process holds, and reports it written so
// that the broadcaster does not retry it; it logs that at verbosity 1.
func (r eventRouter) drop(e *corev1.Event) (*corev1.Event, error) {
	r.ev.dropped.Add(1)
	r.ev.mu.Lock()
	log := r.ev.log
	r.ev.mu.Unlock()
	log.V(1).Info("dropped an Event: this replica holds its object's shard no more", "object", klog.KRef(e.InvolvedObject.Namespace, e.InvolvedObject.Name), "reason", e.Reason)
	return e, nil
}

// eventSink writes a broadcaster's Events with ctx, where client-go's own sink writes them with
// an empty context. The engine's context carries the tenure of its shard (shard.WithTenure), so
// fenceWrites holds its Events as it holds its other writes: a replica whose hold on the shard
// ended does not tell of objects another replica may reconcile now. The broadcaster retries such
// an Event (a TenureOverError is not the API server's refusal) until the tenure is extended again
// or the engine leaves the process's Events (Events.join), which drops it then. ctx is without
// cancel: the Events recorded as the engine stops are still written while it is joined.
type eventSink struct {
	ctx    context.Context
	events typedcorev1.EventInterface
}

// Create writes a new Event.
func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.events.CreateWithEventNamespaceWithContext(s.ctx, e)
}

// Update replaces an Event.
func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.events.UpdateWithEventNamespaceWithContext(s.ctx, e)
}

// Patch counts a repeat of an Event.
func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.events.PatchWithEventNamespaceWithContext(s.ctx, e, data)
}

// quietTenureEnds passes a broadcaster's log lines on, but for the failed writes of Events held
// because the shard's tenure ended (a TenureOverError), which it passes on as information at
// verbosity 1: a replica's hold on a shard ending is expected (a handover), not an error, and
// the broadcaster retries such an Event until the tenure is extended or the engine stops.
type quietTenureEnds struct{ logr.LogSink }

// Init does nothing: the sink it wraps is a logger's already, shared by every other user of
// klog, and initialising it again would write to it under their reads.
func (quietTenureEnds) Init(logr.RuntimeInfo) {}

// Error logs err at error level unless it is a tenure's end.
func (q quietTenureEnds) Error(err error, msg string, keysAndValues ...any) {
	if !errors.As(err, new(*TenureOverError)) {
		q.LogSink.Error(err, msg, keysAndValues...)
		return
	}
	if q.LogSink.Enabled(1) {
		q.LogSink.Info(1, msg, slices.Concat(keysAndValues, []any{"err", err})...)
	}
}

// WithValues and WithName keep the wrapper on the sinks they derive.
func (q quietTenureEnds) WithValues(keysAndValues ...any) logr.LogSink {
	return quietTenureEnds{q.LogSink.WithValues(keysAndValues...)}
}
func (q quietTenureEnds) WithName(name string) logr.LogSink {
	return quietTenureEnds{q.LogSink.WithName(name)}
}

// of returns the recorder of obj's line.
func (l lineRecorder) of(obj runtime.Object) record.EventRecorder {
	o, err := meta.Accessor(obj)
	if err != nil {
		return l[0]
	}
	h := fnv.New32a()
	h.Write([]byte(o.GetUID()))
	return l[h.Sum32()%uint32(len(l))]
}

// Event records an Event about obj.
func (l lineRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	l.of(obj).Event(obj, eventtype, reason, message)
}

// Eventf records an Event about obj with a formatted message.
func (l lineRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	l.of(obj).Eventf(obj, eventtype, reason, messageFmt, args...)
}

// AnnotatedEventf records an annotated Event about obj with a formatted message.
func (l lineRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	l.of(obj).AnnotatedEventf(obj, annotations, eventtype, reason, messageFmt, args...)
}
