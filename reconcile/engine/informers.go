package engine

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine/cached"
)

// informerKey names one informer: a resource in a namespace ("" for all).
type informerKey struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// informer is a running shared informer and the operator's own writes it has not shown yet.
// Informers keep only what the engine reads: a cached object is never written back, so nothing it
// lacks can reach the API server. Children are decoded into a cached.Child (cached.ChildListWatch). Owners are
// handed to render and their status is written from them, so they keep everything but
// managedFields and kubectl's copy of the last applied object (cached.Owner, cached.OwnerListWatch).
type informer struct {
	shared cache.SharedIndexInformer
	// handled tells whether the engine's handler has had the informer's initial list.
	handled cache.ResourceEventHandlerRegistration
	stop    chan struct{}
	// written holds objects the operator just wrote, until the informer has seen them, so that
	// a reconcile right after a write neither writes again nor conflicts with it.
	written *cached.RecentWrites
	// children holds a child informer's objects by controller owner (nil for owners).
	children *cached.ChildrenByOwner
	// strangers, of a child informer, holds the metadata of the objects of its resource and
	// namespace that the operator did not make: the names its new children must not take.
	strangers cache.SharedIndexInformer
}

// synced reports whether the informer has listed its objects and its handler has had them all.
func (i *informer) synced() bool {
	return i.handled.HasSynced() && (i.strangers == nil || i.strangers.HasSynced())
}

// stranger returns the object the operator did not make that is called name in namespace, or nil.
func (i *informer) stranger(namespace, name string) *cached.Child {
	o, exists, err := i.strangers.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil
	}
	return o.(*cached.Child)
}

// owner returns a copy of the owner of key: the informer's, or the operator's newer write of it;
// nil when the informer does not have it (deleted, whatever status was last written).
func (i *informer) owner(key string) (*unstructured.Unstructured, error) {
	o, exists, err := i.shared.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	return i.written.Newer(key, o.(*cached.Owner)).(*cached.Owner).Object()
}

// ownedBy returns the children whose controller owner has the UID owner, each the informer's or
// the operator's newer write of it, with those written but not shown yet.
func (i *informer) ownedBy(owner string) []*cached.Child {
	return i.children.OwnedBy(types.UID(owner), i.written)
}

// ensureInformer starts (once) an informer of gvr in namespace whose events go to enqueue. Child
// informers select by the managed-by label and hold their children by controller owner
// (cached.ChildrenByOwner); their events go to the owner's controller (enqueueOwner). Objects are pruned
// to what the engine reads before they enter the cache.
func (e *Engine) ensureInformer(ctx context.Context, gvr schema.GroupVersionResource, namespace string, owner *Kind, enqueue func(obj any)) *informer {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := informerKey{gvr, namespace}
	if i, ok := e.informers[key]; ok {
		return i
	}
	var inf cache.SharedIndexInformer
	child := owner == nil
	if child {
		selector := evalsi.LabelManagedBy + "=" + evalsi.ManagedBy
		if s := e.cfg.Shard.LabelSelector(evalsi.LabelShardBucket); s != "" {
			selector += "," + s
		}
		lw := cached.ChildListWatch(e.rest, gvr, namespace, selector)
		inf = cache.NewSharedIndexInformerWithOptions(e.gate.ListWatch(lw), &cached.Child{}, cache.SharedIndexInformerOptions{
			ResyncPeriod: e.cfg.Resync, ObjectDescription: gvr.String(),
		})
	} else {
		var lw cache.ListerWatcherWithContext = cached.OwnerListWatch(e.rest, gvr, namespace, owner.asks())
		if !owner.Shared && !e.cfg.Shard.IsWhole() {
			lw = cached.ShardListWatch(lw, e.cfg.Shard)
		}
		inf = cache.NewSharedIndexInformerWithOptions(e.gate.ListWatch(lw), &cached.Owner{}, cache.SharedIndexInformerOptions{
			ResyncPeriod: e.cfg.Resync, Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, referrersIndex: indexByRefers}, ObjectDescription: gvr.String(),
		})
	}
	e.countErrors(inf, gvr)
	i := &informer{shared: inf, stop: make(chan struct{}), written: cached.NewRecentWrites()}
	if child {
		i.children = cached.NewChildrenByOwner()
		i.strangers = cache.NewSharedIndexInformerWithOptions(e.gate.ListWatch(cached.StrangerListWatch(e.rest, gvr, namespace)), &cached.Child{},
			cache.SharedIndexInformerOptions{ObjectDescription: gvr.String() + " not the operator's"})
		e.countErrors(i.strangers, gvr)
	}
	// One handler, so that an event is known for the operator's own write coming back (an echo,
	// which tells a reconcile nothing new) before it is routed: echoes enqueue nothing. It keeps
	// the children by owner first (only a child informer holds Childs), so that the reconcile an
	// event queues reads them.
	handled, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if c, ok := obj.(*cached.Child); ok {
				i.children.Set(nil, c)
			}
			if o, err := meta.Accessor(obj); err == nil && !i.written.Seen(o) {
				enqueue(obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			if c, ok := obj.(*cached.Child); ok {
				was, _ := old.(*cached.Child)
				i.children.Set(was, c)
			}
			o, err := meta.Accessor(obj)
			before, err2 := meta.Accessor(old)
			if err != nil || err2 != nil {
				return
			}
			resync := before.GetResourceVersion() == o.GetResourceVersion()
			// A resync reconciles owners again; it tells a child's owner nothing.
			if echo := i.written.Seen(o); echo || resync && child {
				return
			}
			enqueue(obj)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if c, ok := obj.(*cached.Child); ok {
				i.children.Delete(c)
			}
			if o, err := meta.Accessor(obj); err == nil {
				i.written.Seen(o)
			}
			enqueue(obj)
		},
	})
	if err != nil {
		// Only an informer that has stopped refuses a handler, and this one has not started.
		panic(fmt.Sprintf("adding the handler of the %s informer: %v", gvr, err))
	}
	i.handled = handled
	e.informers[key] = i
	go inf.RunWithContext(stopContext(ctx, i.stop))
	if i.strangers != nil {
		go i.strangers.RunWithContext(stopContext(ctx, i.stop))
	}
	return i
}

// stopContext returns a context that ends with ctx or when stop is closed.
func stopContext(ctx context.Context, stop chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}

func (e *Engine) stopInformer(key informerKey) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i, ok := e.informers[key]; ok {
		close(i.stop)
		delete(e.informers, key)
	}
}

func (e *Engine) stopInformers() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for key, i := range e.informers {
		close(i.stop)
		delete(e.informers, key)
	}
}

// childInformer returns the running informer of a child resource, or nil when it is not served.
func (e *Engine) childInformer(gvr schema.GroupVersionResource, namespace string) *informer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.informers[informerKey{gvr, namespace}]
}

// ownerInformer returns the informer of the running controller whose kind's resource is gvr, or
// nil.
func (e *Engine) ownerInformer(gvr schema.GroupVersionResource) *informer {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.controllers {
		if c.kind.Resource == gvr && c.inf != nil {
			return c.inf
		}
	}
	return nil
}

// enqueueOwner queues the controller owner of a child.
func (e *Engine) enqueueOwner(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	child, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ref := cached.ControllerOf(child)
	if ref.UID == "" {
		return
	}
	c := e.controllerOfKind(ref.Kind)
	if c == nil {
		return
	}
	key := ref.Name
	if c.kind.Namespaced {
		key = child.GetNamespace() + "/" + ref.Name
	}
	c.queue.Add(key)
}

// countErrors counts, in evalsi_informer_errors_total, each error inf's reflector sees from a list
// or watch, which it then handles as client-go does (a log line and a backoff). The API server's
// absence is not one: the gate holds those calls until it answers (cached/apigate.go).
func (e *Engine) countErrors(inf cache.SharedIndexInformer, gvr schema.GroupVersionResource) {
	errs := e.metrics.informerErrors.WithLabelValues(gvr.Resource)
	// Only an informer already started refuses a handler; these are new.
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		errs.Inc()
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
}
