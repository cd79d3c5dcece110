package engine

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
)

// informerKey names one informer: a resource in a namespace ("" for all).
type informerKey struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// informer is a running shared informer and the operator's own writes it has not shown yet.
type informer struct {
	shared cache.SharedIndexInformer
	stop   chan struct{}
	// written holds objects the operator just wrote, until the informer has seen them, so that
	// a reconcile right after a write neither writes again nor conflicts with it.
	written *recentWrites
}

// owner returns a copy of the owner of key: the informer's, or the operator's newer write of it;
// nil when the informer does not have it (deleted, whatever status was last written).
func (i *informer) owner(key string) (*unstructured.Unstructured, error) {
	o, exists, err := i.shared.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	return i.written.newer(key, o.(*cachedOwner)).(*cachedOwner).object()
}

// ownedBy returns the children whose controller owner has the UID owner, each the informer's or
// the operator's newer write of it, with those written but not shown yet.
func (i *informer) ownedBy(owner string) ([]*Child, error) {
	objs, err := i.shared.GetIndexer().ByIndex(ownerIndex, ownerBucket(owner))
	if err != nil {
		return nil, err
	}
	written := i.written.ownedBy(owner)
	out := make([]*Child, 0, len(written)+1)
	for _, o := range objs {
		c := o.(*Child)
		if string(controllerOf(c).UID) != owner {
			continue // another owner's in the same bucket
		}
		key := c.Namespace + "/" + c.Name
		delete(written, key)
		out = append(out, i.written.newer(key, c).(*Child))
	}
	for _, w := range written {
		out = append(out, w.(*Child))
	}
	return out, nil
}

// ownerIndex indexes children by a bucket of their controller owner's UID (ownerBucket), not by
// the UID: the index keeps a set (a map) of the objects of each value, and one per child (an
// owner has one child of each resource) took more memory than the child. A lookup reads the
// bucket's children, a 256th of them as UIDs are random, and keeps the owner's.
const ownerIndex = "owner"

// ownerBucket is the owner index's value for the UID of a controller owner: its first two
// characters. (An index value keeps the UID string it was cut from, 48 bytes of each bucket.)
func ownerBucket(uid string) string {
	if len(uid) > 2 {
		return uid[:2]
	}
	return uid
}

// ensureInformer starts (once) an informer of gvr in namespace whose events go to enqueue. Child
// informers select by the managed-by label and index by controller owner; their events go to the
// owner's controller (enqueueOwner). Objects are pruned to what the engine reads before they
// enter the cache.
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
		lw := childListWatch(e.rest, gvr, namespace, selector)
		inf = cache.NewSharedIndexInformerWithOptions(e.gate.listWatch(lw), &Child{}, cache.SharedIndexInformerOptions{
			ResyncPeriod: e.cfg.Resync, Indexers: cache.Indexers{ownerIndex: indexByOwner}, ObjectDescription: gvr.String(),
		})
	} else {
		var lw cache.ListerWatcherWithContext = ownerListWatch(e.rest, gvr, namespace, owner)
		if !owner.Shared && !e.cfg.Shard.IsWhole() {
			lw = shardListWatch(lw, e.cfg.Shard)
		}
		inf = cache.NewSharedIndexInformerWithOptions(e.gate.listWatch(lw), &cachedOwner{}, cache.SharedIndexInformerOptions{
			ResyncPeriod: e.cfg.Resync, Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, referrersIndex: indexByRefers}, ObjectDescription: gvr.String(),
		})
	}
	i := &informer{shared: inf, stop: make(chan struct{}), written: newRecentWrites()}
	// One handler, so that an event is known for the operator's own write coming back (an echo,
	// which tells a reconcile nothing new) before it is routed: echoes enqueue nothing.
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, err := meta.Accessor(obj); err == nil && !i.written.seen(o) {
				enqueue(obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			o, err := meta.Accessor(obj)
			before, err2 := meta.Accessor(old)
			if err != nil || err2 != nil {
				return
			}
			resync := before.GetResourceVersion() == o.GetResourceVersion()
			// A resync reconciles owners again; it tells a child's owner nothing.
			if echo := i.written.seen(o); echo || resync && child {
				return
			}
			enqueue(obj)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, err := meta.Accessor(obj); err == nil {
				i.written.seen(o)
			}
			enqueue(obj)
		},
	})
	e.informers[key] = i
	go inf.RunWithContext(stopContext(ctx, i.stop))
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
	ref := controllerOf(child)
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

// indexByOwner indexes an object under the bucket of its controller owner's UID.
func indexByOwner(obj any) ([]string, error) {
	o, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	if uid := controllerOf(o).UID; uid != "" {
		return []string{ownerBucket(string(uid))}, nil
	}
	return nil, nil
}

// The informers keep only what the engine reads: a cached object is never written back, so
// nothing it lacks can reach the API server. Children are decoded into a Child
// (childListWatch). Owners are handed to render and their status is written from them, so they
// keep everything but managedFields and kubectl's copy of the last applied object (cachedOwner,
// ownerListWatch).
