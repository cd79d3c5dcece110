package cached

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// APIGate holds the informers' lists and watches while the API server cannot be reached, instead
// of failing them, and tells the engine the moment it serves again (NewAPIGate).
//
// A reflector backs off on every failed list or watch, doubling up to 30 s (jittered up to 60),
// and forgets only after two minutes without a failure; after five 15 s outages in a row its next
// try came up to half a minute after the server was back, and a deleted child waited that long to
// be made again. Held calls never fail, so no reflector backs off; one probe of the server every
// gateProbeInterval finds its return (ready, not only listening), and every held call goes at
// once. Only an unreachable server is held (refused, reset, cut off): an answer, even an error, is
// the reflector's to handle.
type APIGate struct {
	// probe asks the server anything; it fails with an unreachable error while the server is gone.
	probe func(ctx context.Context) error
	// back is called each time the server answers again after being unreachable.
	back func()
	// ctx ends the probing with the engine.
	ctx context.Context
	// calls counts the lists and watches that found the server unreachable, by outcome (held,
	// failed).
	calls *prometheus.CounterVec

	mu sync.Mutex
	// down is open while the server is unreachable and closed when it answers.
	down chan struct{}
}

// NewAPIGate returns the gate of an engine running until ctx ends: probe asks the API server
// anything (it fails with an unreachable error while the server is gone), back is called each
// time the server answers again after being unreachable, and calls counts the lists and watches
// that found it unreachable, by outcome (held, failed).
func NewAPIGate(ctx context.Context, probe func(ctx context.Context) error, back func(), calls *prometheus.CounterVec) *APIGate {
	return &APIGate{ctx: ctx, probe: probe, back: back, calls: calls}
}

// gateProbeInterval is how often the gate asks an unreachable API server whether it is back.
const gateProbeInterval = 250 * time.Millisecond

// Unreachable reports whether err says the API server could not be reached at all: the
// connection refused, reset or cut off, as when its process is gone.
func Unreachable(err error) bool {
	return err != nil && (utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err))
}

// serving reports whether a probe's result says the server is back and serving: it answered, and
// not with a server error. A server that has just started answers before it is ready (its readyz
// fails and its custom resources are not served yet); a list let through then would fail, and
// its reflector would back off after all. A refusal to answer the probe (401, 403) counts as
// serving: the probe is then all the gate can know.
func serving(err error) bool {
	if err == nil {
		return true
	}
	var status apierrors.APIStatus
	return errors.As(err, &status) && status.Status().Code < http.StatusInternalServerError
}

// wait returns once the API server answers again, or with ctx's error.
func (g *APIGate) wait(ctx context.Context) error {
	g.mu.Lock()
	if g.down == nil {
		g.down = make(chan struct{})
		go g.probeUntilBack(g.down)
	}
	down := g.down
	g.mu.Unlock()
	select {
	case <-down:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// probeUntilBack probes the server until it serves again (or the engine stops), then opens the
// gate.
func (g *APIGate) probeUntilBack(down chan struct{}) {
	t := time.NewTicker(gateProbeInterval)
	defer t.Stop()
	for answered := false; !answered; {
		select {
		case <-g.ctx.Done():
			answered = true
		case <-t.C:
			ctx, cancel := context.WithTimeout(g.ctx, 2*time.Second)
			answered = serving(g.probe(ctx))
			cancel()
		}
	}
	g.mu.Lock()
	g.down = nil
	g.mu.Unlock()
	close(down)
	if g.ctx.Err() == nil {
		g.back()
	}
}

// ListWatch returns lw with its lists and watches held by the gate while the server is
// unreachable.
func (g *APIGate) ListWatch(lw cache.ListerWatcherWithContext) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			for {
				obj, err := lw.ListWithContext(ctx, options)
				if !g.held(ctx, err) {
					return obj, err
				}
			}
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			for {
				w, err := lw.WatchWithContext(ctx, options)
				if !g.held(ctx, err) {
					return w, err
				}
			}
		},
	}
}

// held reports whether a call that returned err was held until the server answered again, and
// so is to be made again: only when err says the server was unreachable and ctx did not end
// first. It counts each outcome.
func (g *APIGate) held(ctx context.Context, err error) bool {
	if !Unreachable(err) {
		return false
	}
	if g.wait(ctx) != nil {
		g.calls.WithLabelValues("failed").Inc()
		return false
	}
	g.calls.WithLabelValues("held").Inc()
	return true
}
