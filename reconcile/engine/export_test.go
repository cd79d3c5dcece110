package engine

import (
	"context"

	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"evals.si/operator/shard"
)

// What the external tests (package engine_test) reach inside the engine.
var (
	// ChildRESTConfig is the engine's REST client's configuration.
	ChildRESTConfig = restClientConfig
	// FenceWrites is fenceWrites.
	FenceWrites = fenceWrites
)

// NewEventRecorder returns a recorder writing with kube under ctx, through Events of its own, and
// a function that stops it.
func NewEventRecorder(ctx context.Context, kube kubernetes.Interface, namespace string) (record.EventRecorder, func()) {
	return NewEvents(namespace).join(ctx, shard.Whole, kube)
}

// Join is Events.join.
func (ev *Events) Join(ctx context.Context, s shard.Shard, kube kubernetes.Interface) (record.EventRecorder, func()) {
	return ev.join(ctx, s, kube)
}

// Starts and Dropped count how often ev started its broadcasters and the Events it dropped.
func (ev *Events) Starts() int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return ev.starts
}
func (ev *Events) Dropped() int64 { return ev.dropped.Load() }

// NewEventSink is the sink of an engine's broadcasters, writing events with ctx.
func NewEventSink(ctx context.Context, events typedcorev1.EventInterface) record.EventSink {
	return eventSink{ctx: ctx, events: events}
}
