package reconcile

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
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
	// child says that the informer holds children: a child the operator created is read before
	// the informer shows it; an owner missing from the informer is gone, whatever status the
	// operator last wrote for it.
	child bool
	// written holds objects the operator just wrote, until the informer has seen them, so that
	// a reconcile right after a write neither writes again nor conflicts with it.
	written *recentWrites
}

// remember keeps obj, just written by the operator, until the informer shows it or a newer version.
func (i *informer) remember(obj *unstructured.Unstructured) {
	dropManagedFields(obj)
	i.written.remember(obj)
}

// get returns the object of key: the informer's, or the operator's newer write of it.
func (i *informer) get(key string) (*unstructured.Unstructured, error) {
	o, exists, err := i.shared.GetStore().GetByKey(key)
	if err != nil {
		return nil, err
	}
	if !exists {
		if !i.child {
			return nil, nil
		}
		return i.written.newer(key, nil), nil
	}
	return i.written.newer(key, o.(*unstructured.Unstructured)), nil
}

// ownedBy returns the children whose controller owner has the UID owner, each the informer's or
// the operator's newer write of it, with those written but not shown yet.
func (i *informer) ownedBy(owner string) ([]*unstructured.Unstructured, error) {
	objs, err := i.shared.GetIndexer().ByIndex(ownerIndex, owner)
	if err != nil {
		return nil, err
	}
	written := i.written.ownedBy(owner)
	out := make([]*unstructured.Unstructured, 0, len(objs)+len(written))
	for _, o := range objs {
		u := o.(*unstructured.Unstructured)
		key := u.GetNamespace() + "/" + u.GetName()
		if w, ok := written[key]; ok {
			delete(written, key)
			if versionOf(w) > versionOf(u) {
				u = w
			}
		}
		out = append(out, u)
	}
	for _, w := range written {
		out = append(out, w)
	}
	return out, nil
}

// ownerIndex indexes children by the UID of their controller owner.
const ownerIndex = "owner"

// ensureInformer starts (once) an informer of gvr in namespace whose events go to enqueue. Child
// informers select by the managed-by label and index by controller owner; their events go to the
// owner's controller (enqueueOwner). Every informer drops managedFields before objects enter its
// cache.
func (e *Engine) ensureInformer(ctx context.Context, gvr schema.GroupVersionResource, namespace string, child bool, enqueue func(obj any)) *informer {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := informerKey{gvr, namespace}
	if i, ok := e.informers[key]; ok {
		return i
	}
	var tweak dynamicinformer.TweakListOptionsFunc
	indexers := cache.Indexers{}
	if child {
		tweak = func(o *metav1.ListOptions) { o.LabelSelector = evalsi.LabelManagedBy + "=" + evalsi.ManagedBy }
		indexers[ownerIndex] = indexByOwner
	} else {
		indexers[cache.NamespaceIndex] = cache.MetaNamespaceIndexFunc
	}
	gi := dynamicinformer.NewFilteredDynamicInformer(e.client, gvr, namespace, e.cfg.Resync, indexers, tweak)
	inf := gi.Informer()
	inf.SetTransform(dropManagedFields)
	i := &informer{shared: inf, stop: make(chan struct{}), child: child, written: newRecentWrites()}
	// One handler, so that an event is known for the operator's own write coming back (an echo,
	// which tells a reconcile nothing new) before it is routed: echoes enqueue nothing.
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if !i.written.seen(obj.(*unstructured.Unstructured)) {
				enqueue(obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			u := obj.(*unstructured.Unstructured)
			resync := old.(*unstructured.Unstructured).GetResourceVersion() == u.GetResourceVersion()
			// A resync reconciles owners again; it tells a child's owner nothing.
			if echo := i.written.seen(u); echo || resync && child {
				return
			}
			enqueue(obj)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				i.written.seen(u)
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

// enqueueOwner queues the controller owner of a child.
func (e *Engine) enqueueOwner(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	child, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(child)
	if ref == nil {
		return
	}
	k := kindByName(ref.Kind)
	if k == nil {
		return
	}
	e.mu.Lock()
	c := e.controllers[k.controller]
	e.mu.Unlock()
	if c == nil {
		return
	}
	key := ref.Name
	if k.namespaced {
		key = child.GetNamespace() + "/" + ref.Name
	}
	c.queue.Add(key)
}

// indexByOwner indexes an object under the UID of its controller owner.
func indexByOwner(obj any) ([]string, error) {
	o, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}

// dropManagedFields keeps managedFields out of the cache: they are large and never read there.
func dropManagedFields(obj any) (any, error) {
	if o, err := meta.Accessor(obj); err == nil {
		o.SetManagedFields(nil)
	}
	return obj, nil
}
