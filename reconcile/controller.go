package reconcile

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// controller is the queue and workers of one kind.
type controller struct {
	e     *Engine
	k     *kind
	queue workqueue.TypedRateLimitingInterface[string]
	inf   *informer
}

func newController(e *Engine, k *kind) *controller {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: k.controller, MetricsProvider: e.metrics.queues},
	)
	return &controller{e: e, k: k, queue: q}
}

// enqueue adds an object's namespace/name key.
func (c *controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		c.e.log.Error("cannot key object", "controller", c.k.controller, "err", err)
		return
	}
	c.queue.Add(key)
}

// enqueueAll adds every object in the cache, for a change that concerns all of them.
func (c *controller) enqueueAll() {
	if c.inf == nil {
		return
	}
	for _, key := range c.inf.shared.GetStore().ListKeys() {
		c.queue.Add(key)
	}
}

// run waits for the cache, runs the workers until ctx ends, then drains.
func (c *controller) run(ctx context.Context) {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.inf.shared.HasSynced) {
		return
	}
	done := make(chan struct{})
	for range c.e.cfg.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for c.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	for range c.e.cfg.Workers {
		<-done
	}
}

// processNext reconciles one key. Done is always called; Forget on success and on terminal
// errors; a rate-limited requeue on other errors; AddAfter when the reconcile asked for it.
func (c *controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)

	start := time.Now()
	outcome, err := c.reconcileKey(ctx, key)
	c.e.waiters.note(c, key, err)
	result := "success"
	switch {
	case err == nil:
		c.queue.Forget(key)
		if outcome.RequeueAfter > 0 {
			result = "requeue"
			c.queue.AddAfter(key, outcome.RequeueAfter)
		}
	case errors.Is(err, errCacheNotSynced):
		// A child informer (KEDA's ScaledObjects, just discovered) is still listing.
		result = "requeue"
		c.queue.AddAfter(key, time.Second)
	case apierrors.IsConflict(err):
		// A write raced with another (often our own status write not yet in the cache): the
		// informer brings the new version, and the retry starts from it.
		result = "conflict"
		c.e.log.Debug("conflict; retrying", "controller", c.k.controller, "key", key, "err", err)
		c.queue.AddRateLimited(key)
	case isTerminal(err):
		result = "terminal"
		c.e.log.Warn("reconcile failed; not retrying until the object changes", "controller", c.k.controller, "key", key, "err", err)
		c.queue.Forget(key)
	default:
		result = "error"
		c.e.log.Error("reconcile failed; retrying", "controller", c.k.controller, "key", key, "err", err)
		c.queue.AddRateLimited(key)
	}
	c.e.metrics.observeReconcile(c.k.controller, result, time.Since(start))
	return true
}

// reconcileKey reads the object from the cache, runs the kind's reconcile with a timeout and a
// panic guard, and writes the status it returned.
func (c *controller) reconcileKey(ctx context.Context, key string) (outcome Outcome, err error) {
	if c.e.versionRefusal() != "" {
		// On an unsupported Kubernetes minor nothing is written; discovery checks the version
		// again, and the objects are looked at once it is supported.
		return Outcome{RequeueAfter: c.e.cfg.DiscoveryInterval}, nil
	}
	obj, err := c.inf.owner(key)
	if err != nil {
		return Outcome{}, fmt.Errorf("reading %s from the cache: %w", key, err)
	}
	if obj == nil {
		// Deleted: children go with their owner (garbage collection); nothing to do.
		return Outcome{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.e.cfg.ReconcileTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic reconciling %s: %v\n%s", key, r, trimStack(debug.Stack()))
		}
	}()
	outcome, err = c.reconcileObject(ctx, obj)
	if te := (*TerminalError)(nil); errors.As(err, &te) {
		if outcome.Status == nil {
			outcome.Status = &Status{Fields: statusFields(obj)}
		}
		// The last condition of a type wins: this Ready replaces the reconcile's. Stalled (the
		// kstatus convention) says that nothing changes until the spec does.
		outcome.Status.Conditions = append(outcome.Status.Conditions,
			Ready(false, te.Reason, te.Error()),
			Condition{Type: evalsi.ConditionStalled, Status: "True", Reason: te.Reason, Message: te.Error()})
	}
	if outcome.Status != nil {
		written, serr := c.e.writeStatus(ctx, c.k, obj, outcome.Status)
		if serr != nil {
			return outcome, errors.Join(err, serr)
		}
		if written != nil {
			// Kept until the informer shows it or a newer version.
			c.inf.written.remember(written)
		}
	}
	return outcome, err
}

// reconcileObject runs the checks every object meets, then the kind's reconcile.
func (c *controller) reconcileObject(ctx context.Context, obj *unstructured.Unstructured) (Outcome, error) {
	if obj.GetNamespace() != "" {
		// Before anything else: an object whose namespace may not act in the project it names
		// makes no call and no child (a namespace editor must not act in another team's name).
		if _, err := render.Project(obj, c.e.renderOptions()); err != nil {
			return c.e.projectNotAllowed(ctx, c.k, obj, err)
		}
	}
	if obj.GetDeletionTimestamp() == nil && c.k.api {
		if stalled(obj) {
			// evalsid refused this spec, and would again: no call until the spec changes.
			// Workload kinds render again, which costs nothing outside and picks up a fixed
			// operator configuration (refusedBefore keeps them from applying it again).
			return Outcome{}, nil
		}
		// An object that entered while the webhook was off meets the same rules here. Workload
		// kinds meet them when they render (render.Validate is rendering); the API kinds are
		// checked first, since they may call evalsid before they decode.
		if err := render.Validate(obj, c.e.limits()); err != nil {
			return Outcome{}, Terminal(evalsi.ReasonInvalidSpec, err)
		}
	}
	return c.k.reconcile(ctx, c.e, c.k, obj)
}

// trimStack keeps the first lines of a stack trace for a log line.
func trimStack(stack []byte) string {
	lines := strings.Split(string(stack), "\n")
	if len(lines) > 30 {
		lines = lines[:30]
	}
	return strings.Join(lines, "\n")
}
