package engine

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"

	"evals.si/operator/evalsi"
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

// newEventRecorder starts eventLines broadcasters writing to namespace's Events ("" for each
// object's own) until ctx ends, and returns their recorder and a function that flushes and stops
// them. Their writes carry ctx's values, so that a shard's tenure fences them (eventSink).
func newEventRecorder(ctx context.Context, kube kubernetes.Interface, namespace string) (record.EventRecorder, func()) {
	lines := make(lineRecorder, eventLines)
	var broadcasters []record.EventBroadcaster
	// The broadcasters log through ctx's logger (klog's, which the operator routes into its own).
	ctx = klog.NewContext(ctx, logr.New(quietTenureEnds{klog.FromContext(ctx).GetSink()}))
	sink := eventSink{ctx: context.WithoutCancel(ctx), events: kube.CoreV1().Events(namespace)}
	for i := range lines {
		b := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: eventKeys}))
		b.StartRecordingToSink(sink)
		lines[i] = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: evalsi.FieldManager})
		broadcasters = append(broadcasters, b)
	}
	return lines, func() {
		for _, b := range broadcasters {
			b.Shutdown()
		}
	}
}

// eventSink writes a broadcaster's Events with ctx, where client-go's own sink writes them with
// an empty context. The engine's context carries the tenure of its shard (shard.WithTenure), so
// fenceWrites holds its Events as it holds its other writes: a replica whose hold on the shard
// ended does not tell of objects another replica may reconcile now. The broadcaster retries such
// an Event (a TenureOverError is not the API server's refusal) until the tenure is extended again
// or the engine stops and shuts the broadcaster down. ctx is without cancel: the Events recorded
// as the engine stops are still written.
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
