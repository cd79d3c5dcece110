package engine

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

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

// informerSet are the engine's running informers by resource and namespace, and the informers
// of its kinds' own objects by resource, which controllers read other kinds' objects from.
type informerSet struct {
	mu     sync.Mutex
	byKey  map[informerKey]*informer
	owners map[schema.GroupVersionResource]*informer
}

func newInformerSet() *informerSet {
	return &informerSet{byKey: map[informerKey]*informer{}, owners: map[schema.GroupVersionResource]*informer{}}
}

// childInformer returns the running informer of a child resource, or nil when it is not served.
func (s *informerSet) childInformer(gvr schema.GroupVersionResource, namespace string) *informer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKey[informerKey{gvr, namespace}]
}

// ownerInformer returns the informer of the objects of the running controller whose kind's
// resource is gvr, or nil.
func (s *informerSet) ownerInformer(gvr schema.GroupVersionResource) *informer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owners[gvr]
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
