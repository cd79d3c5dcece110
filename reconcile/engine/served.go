package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// servedSet is what discovery last saw served: which resources, and the resource of each
// kind, for applying and deleting children. Discovery writes it; controllers read it.
type servedSet struct {
	mu        sync.Mutex
	resources map[schema.GroupVersionResource]bool
	kinds     map[schema.GroupVersionKind]schema.GroupVersionResource
}

func newServedSet() *servedSet {
	return &servedSet{resources: map[schema.GroupVersionResource]bool{}, kinds: map[schema.GroupVersionKind]schema.GroupVersionResource{}}
}

// isServed reports whether discovery last saw gvr.
func (s *servedSet) isServed(gvr schema.GroupVersionResource) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resources[gvr]
}

// replace records served as what is served, and returns those of want whose answer changed.
func (s *servedSet) replace(served, want map[schema.GroupVersionResource]bool) []schema.GroupVersionResource {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []schema.GroupVersionResource
	for gvr := range want {
		if served[gvr] != s.resources[gvr] {
			changed = append(changed, gvr)
		}
	}
	s.resources = served
	return changed
}

// learnKind records gvr as the resource of objects of kind gvk.
func (s *servedSet) learnKind(gvk schema.GroupVersionKind, gvr schema.GroupVersionResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kinds[gvk] = gvr
}

// resourceOfKind returns the resource of objects of apiVersion and kind, as discovery saw it, and
// false when discovery has not seen it served.
func (s *servedSet) resourceOfKind(apiVersion, kind string) (schema.GroupVersionResource, bool) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gvr, ok := s.kinds[gv.WithKind(kind)]; ok || apiVersion != "" {
		return gvr, ok
	}
	// An object read without its apiVersion: the one served resource of its kind.
	for gvk, gvr := range s.kinds {
		if gvk.Kind == kind {
			return gvr, true
		}
	}
	return schema.GroupVersionResource{}, false
}
