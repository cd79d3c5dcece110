package engine

import (
	"context"

	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// What the external tests (package engine_test) reach inside the engine.
var (
	// ChildRESTConfig is the engine's REST client's configuration.
	ChildRESTConfig = restClientConfig
	// NewEventRecorder is newEventRecorder.
	NewEventRecorder = newEventRecorder
	// FenceWrites is fenceWrites.
	FenceWrites = fenceWrites
)

// NewEventSink is the sink of an engine's broadcasters, writing events with ctx.
func NewEventSink(ctx context.Context, events typedcorev1.EventInterface) record.EventSink {
	return eventSink{ctx: ctx, events: events}
}
