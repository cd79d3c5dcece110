package engine

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine/cached"
)

// ensureInformer starts (once) an informer of gvr in namespace whose events go to enqueue. Child
// informers select by the managed-by label and hold their children by controller owner
// (cached.ChildrenByOwner); their events go to the owner's controller (enqueueOwner). Objects are pruned
// to what the engine reads before they enter the cache.
func (e *Engine) ensureInformer(ctx context.Context, gvr schema.GroupVersionResource, namespace string, owner *Kind, enqueue func(obj any)) *informer {
	e.informers.mu.Lock()
	defer e.informers.mu.Unlock()
	key := informerKey{gvr, namespace}
	if i, ok := e.informers.byKey[key]; ok {
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
	e.informers.byKey[key] = i
	if !child {
		e.informers.owners[gvr] = i
	}
	go inf.RunWithContext(stopContext(ctx, i.stop))
	if i.strangers != nil {
		go i.strangers.RunWithContext(stopContext(ctx, i.stop))
	}
	return i
}

// stopInformer stops the informer of a child resource that is no longer served.
func (e *Engine) stopInformer(key informerKey) {
	e.informers.mu.Lock()
	defer e.informers.mu.Unlock()
	if i, ok := e.informers.byKey[key]; ok {
		close(i.stop)
		delete(e.informers.byKey, key)
	}
}

// stopInformers stops every informer, as the engine stops.
func (e *Engine) stopInformers() {
	e.informers.mu.Lock()
	defer e.informers.mu.Unlock()
	for key, i := range e.informers.byKey {
		close(i.stop)
		delete(e.informers.byKey, key)
	}
	clear(e.informers.owners)
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
