package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine/cached"
)

// errCacheNotSynced says that a child informer has not listed yet: the reconcile comes back
// shortly rather than take every child for missing.
var errCacheNotSynced = errors.New("the children's cache has not synced yet")

// Kind returns the controller's kind.
func (c *Controller) Kind() *Kind { return c.kind }

// Log returns the engine's logger.
func (c *Controller) Log() *slog.Logger { return c.log }

// Dynamic and Kube return the engine's clients, for what a kind reads that no cache holds.
func (c *Controller) Dynamic() dynamic.Interface { return c.client }
func (c *Controller) Kube() kubernetes.Interface { return c.kube }

// Project returns the project obj acts in, as the engine checks it before each reconcile.
func (c *Controller) Project(obj *unstructured.Unstructured) (string, error) { return c.project(obj) }

// Served reports whether discovery last saw gvr served.
func (c *Controller) Served(gvr schema.GroupVersionResource) bool { return c.served.isServed(gvr) }

// Synced reports whether the controller's cache has synced and the engine reconciles.
func (c *Controller) Synced() bool {
	return c.inf.shared.HasSynced() && c.VersionRefusal() == ""
}

// Enqueue adds the key namespace/name (name for a cluster-scoped kind) to the queue.
func (c *Controller) Enqueue(key string) { c.queue.Add(key) }

// Objects returns a copy of every object of the kind in the cache, with its key.
func (c *Controller) Objects() map[string]*unstructured.Unstructured { return c.objects(false) }

// Followed returns a copy of every object in the cache that the kind's Followed selects, with its
// key; the others are not decoded.
func (c *Controller) Followed() map[string]*unstructured.Unstructured { return c.objects(true) }

// objects returns copies of the cached objects, only the followed ones when followed is set.
func (c *Controller) objects(followed bool) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range c.inf.shared.GetStore().List() {
		co := o.(*cached.Owner)
		if followed && !co.Followed || !c.shard.Contains(string(co.GetUID())) {
			continue
		}
		obj, err := co.Object()
		if err != nil {
			continue // its reconcile reports it
		}
		key := co.Name
		if co.Namespace != "" {
			key = co.Namespace + "/" + co.Name
		}
		out[key] = obj
	}
	return out
}

// Event records an Event about obj.
func (c *Controller) Event(obj *unstructured.Unstructured, eventType, reason, message string) {
	c.recorder.Event(obj, eventType, reason, message)
}

// Eventf records an Event about obj with a formatted message.
func (c *Controller) Eventf(obj *unstructured.Unstructured, eventType, reason, format string, args ...any) {
	c.recorder.Eventf(obj, eventType, reason, format, args...)
}

// Lookup returns a copy of the object name in namespace of resource gvr: from the cache of a
// running controller of that resource, else read from the API server. It returns a NotFound
// error when there is none.
func (c *Controller) Lookup(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, error) {
	if inf := c.informers.ownerInformer(gvr); inf != nil && inf.shared.HasSynced() {
		key := name
		if namespace != "" {
			key = namespace + "/" + name
		}
		obj, err := inf.owner(key)
		if err != nil {
			return nil, err
		}
		if obj == nil {
			return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
		}
		return obj, nil
	}
	return c.client.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
}

// DeleteObject deletes obj, an object of the controller's kind, if it is still the same object
// (its UID): one deleted already, or replaced by another of its name, is left alone.
func (c *Controller) DeleteObject(ctx context.Context, obj *unstructured.Unstructured) error {
	uid := obj.GetUID()
	err := c.client.Resource(c.kind.Resource).Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(),
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// childNamespace is where the kind's children live, as informers watch them: the kind's
// ChildNamespace, else the engine's namespace ("" for all).
func (c *Controller) childNamespace() string {
	if c.kind.ChildNamespace != "" {
		return c.kind.ChildNamespace
	}
	return c.namespace
}

// enqueue adds an object's namespace/name key.
func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		c.log.Error("cannot key object", "controller", c.kind.Controller, "err", err)
		return
	}
	c.queue.Add(key)
}

// enqueueAll adds every object in the cache, for a change that concerns all of them.
func (c *Controller) enqueueAll() {
	if c.inf == nil {
		return
	}
	for _, key := range c.inf.shared.GetStore().ListKeys() {
		c.queue.Add(key)
	}
}

// enqueueNamespace adds every object of namespace in the cache.
func (c *Controller) enqueueNamespace(namespace string) {
	objs, err := c.inf.shared.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		c.log.Error("listing a namespace's objects", "controller", c.kind.Controller, "err", err)
		return
	}
	for _, o := range objs {
		c.enqueue(o)
	}
}

// run waits for the cache, runs the workers until ctx ends, then shuts the queue down, and only
// then drops its gauges (what it still held is no one's work any more). In a warm engine the
// workers reconcile without writing, and the objects that need a write are queued again once
// the engine may write (hold, release).
func (c *Controller) run(ctx context.Context) {
	defer c.metrics.notReady.release(c.notReady)
	defer c.queueGauges.release()
	defer c.queue.ShutDown()
	start := time.Now()
	if !cache.WaitForCacheSync(ctx.Done(), c.inf.shared.HasSynced) {
		return
	}
	c.log.Info("controller synced", "controller", c.kind.Controller, "queued", c.queue.Len(), "took", time.Since(start).Round(time.Millisecond).String())
	if !c.Writable() {
		c.log.Info("controller warms: it reconciles without writing until the shard's Lease is taken", "controller", c.kind.Controller)
		go func() {
			if c.waitWritable(ctx) {
				c.release()
			}
		}()
	}
	done := make(chan struct{})
	for range c.workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for c.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	for range c.workers {
		<-done
	}
}

// hold keeps key until the engine may write (release), or queues it now if it already may: its
// reconcile was refused a write before the gate opened, and ended after.
func (c *Controller) hold(key string) {
	h := &c.held
	h.mu.Lock()
	if !h.released {
		if h.keys == nil {
			h.keys = map[string]struct{}{}
		}
		h.keys[key] = struct{}{}
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	c.queue.Add(key)
}

// release queues every held key: the engine may write now.
func (c *Controller) release() {
	h := &c.held
	h.mu.Lock()
	keys := h.keys
	h.keys, h.released = nil, true
	h.mu.Unlock()
	c.log.Info("controller writes: the shard's Lease is taken", "controller", c.kind.Controller, "held", len(keys))
	for key := range keys {
		c.queue.Add(key)
	}
}

// processNext reconciles one key. Done is always called; Forget on success and on terminal
// errors; a rate-limited requeue on other errors; AddAfter when the reconcile asked for it.
func (c *Controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)

	start := time.Now()
	outcome, err := c.reconcileKey(ctx, key)
	c.waiters.note(c.queue, key, err)
	c.apiWaiters.note(c.queue, key, err)
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
		c.log.Debug("conflict; retrying", "controller", c.kind.Controller, "key", key, "err", err)
		c.queue.AddRateLimited(key)
	case isWarmRefusal(err):
		// A warm engine reached a write: the object waits until this replica holds the shard.
		result = "held"
		c.queue.Forget(key)
		c.hold(key)
	case errors.As(err, new(*TenureOverError)):
		// This replica's hold on the object's shard ended (no renewal of its Lease accepted for a
		// renew deadline): the shard's holder stops this engine within a round, or the next
		// renewal extends the hold and the retry writes.
		result = "requeue"
		c.log.Debug("not written: the shard's hold ended", "controller", c.kind.Controller, "key", key, "err", err)
		c.queue.AddAfter(key, time.Second)
	case IsTerminal(err):
		result = "terminal"
		c.log.Warn("reconcile failed; not retrying until the object changes", "controller", c.kind.Controller, "key", key, "err", err)
		c.queue.Forget(key)
	default:
		result = "error"
		c.log.Error("reconcile failed; retrying", "controller", c.kind.Controller, "key", key, "err", err)
		c.queue.AddRateLimited(key)
	}
	c.metrics.observeReconcile(c.kind.Controller, c.shard.String(), result, time.Since(start))
	return true
}

// reconcileKey reads the object from the cache, runs the reconcile with a timeout and a panic
// guard, and writes the status it decided.
func (c *Controller) reconcileKey(ctx context.Context, key string) (outcome Outcome, err error) {
	if c.VersionRefusal() != "" {
		// On an unsupported Kubernetes minor nothing is written; discovery checks the version
		// again, and the objects are looked at once it is supported.
		return Outcome{RequeueAfter: c.discoveryInterval}, nil
	}
	obj, err := c.inf.owner(key)
	if err != nil {
		return Outcome{}, fmt.Errorf("reading %s from the cache: %w", key, err)
	}
	if obj == nil {
		// Deleted: children go with their owner (garbage collection); nothing to do.
		c.validated.forget(key)
		c.notReady.observe(key, nil)
		return Outcome{}, nil
	}
	if !c.shard.Contains(string(obj.GetUID())) {
		// A Shared kind's object of another shard: cached here to be read, reconciled there.
		c.notReady.observe(key, nil)
		return Outcome{}, nil
	}
	// Whatever the reconcile ends with, the status obj holds then is the object's (the one
	// written, or the one it had).
	defer func() { c.notReady.observe(key, obj) }()
	ctx, cancel := context.WithTimeout(ctx, c.reconcileTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic reconciling %s: %v\n%s", key, r, trimStack(debug.Stack()))
		}
	}()
	outcome, err = c.reconcileObject(ctx, key, obj)
	if taken := (*NameTakenError)(nil); errors.As(err, &taken) {
		// Not Stalled: freeing the name fixes it without a new spec, and no event says when.
		outcome, err = Outcome{Status: NotReady(evalsi.ReasonConflict, taken.Error()), RequeueAfter: nameRecheck}, nil
	}
	var te *TerminalError
	errors.As(err, &te)
	if outcome.Status == nil && te == nil {
		return outcome, err
	}
	written, serr := c.writeStatus(ctx, c.kind.Resource, obj, outcome.Status, te)
	if serr != nil {
		return outcome, errors.Join(err, serr)
	}
	if written != nil {
		// Kept until the informer shows it or a newer version.
		c.inf.written.Remember(written)
	}
	return outcome, err
}

// reconcileObject runs the checks every object meets (its project; its spec, once a generation),
// then the kind's Reconciler.
func (c *Controller) reconcileObject(ctx context.Context, key string, obj *unstructured.Unstructured) (Outcome, error) {
	r := &Request{Object: obj, Controller: c, Refused: refused(obj)}
	if obj.GetNamespace() != "" {
		// Before anything else: an object whose namespace may not act in the project it names
		// makes no call and no child (a namespace editor must not act in another team's name).
		project, err := c.project(obj)
		if err != nil {
			return c.projectNotAllowed(ctx, obj, err)
		}
		r.Project = project
	}
	if obj.GetDeletionTimestamp() != nil && c.kind.Finalizer == "" {
		// Being deleted, with no finalizer of the operator's to release: its children go with it
		// (garbage collection) or stay as orphans. Applying them now would put back the owner
		// reference the collector just took off an orphan, and the child would go after all.
		return Outcome{}, nil
	}
	if k := c.kind; k.Validate != nil && obj.GetDeletionTimestamp() == nil && r.Refused == "" {
		// An object that entered while the webhook was off meets the same rules here, once per
		// generation.
		if err := c.validated.check(key, obj, k.Validate); err != nil {
			return Outcome{}, Terminal(evalsi.ReasonInvalidSpec, err)
		}
		r.SpecChecked = true
	}
	return c.kind.Reconciler.Reconcile(ctx, r)
}

// projectNotAllowed is the outcome of an object that names a project its namespace may not act
// in: Ready=False ProjectNotAllowed and no call or child. It is not Stalled, since a binding made
// later fixes it without a new spec. A deleted object lets its finalizer go without a call: the
// operator had no authority to act in that project, so nothing was made there in its name.
func (c *Controller) projectNotAllowed(ctx context.Context, obj *unstructured.Unstructured, err error) (Outcome, error) {
	if obj.GetDeletionTimestamp() != nil {
		if c.kind.Finalizer == "" {
			return Outcome{}, nil
		}
		return Outcome{}, c.setFinalizer(ctx, obj, c.kind.Finalizer, false)
	}
	return Outcome{Status: NotReady(evalsi.ReasonProjectNotAllowed, err.Error())}, nil
}

// setFinalizer adds or removes finalizer on obj, an object of the controller's kind
// (patchFinalizer).
func (c *Controller) setFinalizer(ctx context.Context, obj *unstructured.Unstructured, finalizer string, present bool) error {
	return c.patchFinalizer(ctx, c.kind.Resource, obj, finalizer, present)
}

// trimStack keeps the first lines of a stack trace for a log line.
func trimStack(stack []byte) string {
	lines := strings.Split(string(stack), "\n")
	if len(lines) > 30 {
		lines = lines[:30]
	}
	return strings.Join(lines, "\n")
}
