package reconcile

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

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
	written cache.MutationCache
}

// remember keeps obj, just written by the operator, until the informer shows it or a newer version.
func (i *informer) remember(obj *unstructured.Unstructured) {
	dropManagedFields(obj)
	i.written.Mutation(obj)
}

// ownerIndex indexes children by the UID of their controller owner.
const ownerIndex = "owner"

// ensureInformer starts (once) an informer of gvr in namespace. Child informers select by the
// managed-by label, index by controller owner and route events to the owner's controller. Every
// informer drops managedFields before objects enter its cache.
func (e *Engine) ensureInformer(ctx context.Context, gvr schema.GroupVersionResource, namespace string, child bool) *informer {
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
	i := &informer{shared: inf, stop: make(chan struct{})}
	// A child the operator created is there before the informer shows it (IncludeAdds); an owner
	// missing from the informer is gone, whatever status the operator last wrote for it.
	i.written = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), inf.GetStore(), cache.MutationCacheOptions{
		Indexer: inf.GetIndexer(), TTL: time.Minute, IncludeAdds: child, MaxCacheSize: 10000,
	})
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			i.written.OnAddOrUpdate(obj.(*unstructured.Unstructured))
			if child {
				e.enqueueOwner(obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			i.written.OnAddOrUpdate(obj.(*unstructured.Unstructured))
			if child && old.(*unstructured.Unstructured).GetResourceVersion() != obj.(*unstructured.Unstructured).GetResourceVersion() {
				e.enqueueOwner(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				i.written.OnDelete(u)
			}
			if child {
				e.enqueueOwner(obj)
			}
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
