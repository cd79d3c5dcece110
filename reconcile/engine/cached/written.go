package cached

import (
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// writtenTTL bounds how long a write is remembered without the informer showing it (a watch
// that missed it relists within that time).
const writtenTTL = time.Minute

// RecentWrites holds the objects the operator just wrote until its informer shows them or a newer
// version, so that a reconcile right after a write reads what it wrote: it neither writes again
// nor conflicts with itself. Unlike client-go's MutationCache, a lookup costs the same however
// many writes are remembered (children are indexed by owner), and a write is forgotten as soon as
// the informer catches up, so that steady state keeps no second copy of any object.
type RecentWrites struct {
	mu      sync.Mutex
	objs    map[string]recentWrite // by namespace/name
	byOwner map[string]map[string]bool
	// swept is when expired writes were last dropped; a write the informer never shows (a watch
	// that missed it) is dropped within two TTLs even if nothing reads it.
	swept time.Time
}

type recentWrite struct {
	obj     metav1.Object
	version uint64
	owner   string // the controller owner's UID, "" for none
	expires time.Time
}

func NewRecentWrites() *RecentWrites {
	return &RecentWrites{objs: map[string]recentWrite{}, byOwner: map[string]map[string]bool{}}
}

// remember keeps obj, just written, unless a newer version of it is remembered already.
func (w *RecentWrites) Remember(obj metav1.Object) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	r := recentWrite{obj: obj, version: versionOf(obj), expires: time.Now().Add(writtenTTL)}
	r.owner = string(ControllerOf(obj).UID)
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.swept) > writtenTTL {
		for k := range w.objs {
			w.live(k)
		}
		w.swept = time.Now()
	}
	if old, ok := w.objs[key]; ok {
		if old.version > r.version {
			return
		}
		w.drop(key, old)
	}
	w.objs[key] = r
	if r.owner != "" {
		if w.byOwner[r.owner] == nil {
			w.byOwner[r.owner] = map[string]bool{}
		}
		w.byOwner[r.owner][key] = true
	}
}

// seen forgets the write of obj's key once the informer shows obj at the same or a newer version
// (a delete included). It reports whether obj is the operator's own write coming back: the very
// version remembered, which tells a reconcile nothing it did not know when it wrote it.
func (w *RecentWrites) Seen(obj metav1.Object) (echo bool) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.objs[key]
	if !ok {
		return false
	}
	v := versionOf(obj)
	if r.version <= v {
		w.drop(key, r)
	}
	return r.version == v && v != 0
}

// newer returns the remembered write of key when it is newer than cached, else cached.
func (w *RecentWrites) Newer(key string, cached metav1.Object) metav1.Object {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.live(key)
	if !ok || r.version <= versionOf(cached) {
		return cached
	}
	return r.obj
}

// ownedBy returns the remembered writes whose controller owner has the UID owner, by key.
func (w *RecentWrites) OwnedBy(owner string) map[string]metav1.Object {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]metav1.Object{}
	for key := range w.byOwner[owner] {
		if r, ok := w.live(key); ok {
			out[key] = r.obj
		}
	}
	return out
}

// live returns the write of key unless it expired (then it is dropped). w.mu is held.
func (w *RecentWrites) live(key string) (recentWrite, bool) {
	r, ok := w.objs[key]
	if ok && time.Now().After(r.expires) {
		w.drop(key, r)
		return recentWrite{}, false
	}
	return r, ok
}

// drop forgets the write r of key. w.mu is held.
func (w *RecentWrites) drop(key string, r recentWrite) {
	delete(w.objs, key)
	if keys := w.byOwner[r.owner]; keys != nil {
		delete(keys, key)
		if len(keys) == 0 {
			delete(w.byOwner, r.owner)
		}
	}
	if len(w.objs) == 0 {
		// A map keeps the room of its largest size: once a burst of writes is all shown, the
		// room it took goes back to the heap.
		w.objs, w.byOwner = map[string]recentWrite{}, map[string]map[string]bool{}
	}
}

// versionOf reads an object's resourceVersion as the number etcd gives it (0 when it is not one):
// only versions of one object are compared.
func versionOf(obj metav1.Object) uint64 {
	v, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	return v
}
