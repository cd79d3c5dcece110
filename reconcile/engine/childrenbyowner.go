package engine

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// childrenByOwner holds a child informer's children by the UID of their controller owner. The
// informer's one event handler keeps it, before it routes the event, so a reconcile that an event
// queued reads the children as of that event at least. A client-go index would keep a set (a
// map) per owner, and an owner has one child of each resource: the sets took more memory than
// the children, and reading one costs a lookup in the store per child.
type childrenByOwner struct {
	mu sync.RWMutex
	by map[types.UID][]*Child
}

func newChildrenByOwner() *childrenByOwner {
	return &childrenByOwner{by: map[types.UID][]*Child{}}
}

// of returns the children of owner.
func (x *childrenByOwner) of(owner types.UID) []*Child {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Clone(x.by[owner])
}

// set records c, added or changed, in place of old (nil when added): a child whose controller
// owner changed moves to the new owner's.
func (x *childrenByOwner) set(old, c *Child) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old != nil && controllerOf(old).UID != controllerOf(c).UID {
		x.remove(old)
	}
	owner := controllerOf(c).UID
	if owner == "" {
		return
	}
	children := x.by[owner]
	if i := slices.IndexFunc(children, sameObject(c)); i >= 0 {
		children[i] = c
		return
	}
	x.by[owner] = append(children, c)
}

// delete forgets c.
func (x *childrenByOwner) delete(c *Child) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(c)
}

// remove forgets c; x.mu is held.
func (x *childrenByOwner) remove(c *Child) {
	owner := controllerOf(c).UID
	children := slices.DeleteFunc(x.by[owner], sameObject(c))
	if len(children) == 0 {
		delete(x.by, owner)
		return
	}
	x.by[owner] = children
}

// sameObject matches the children of c's namespace and name, at any version.
func sameObject(c *Child) func(*Child) bool {
	return func(o *Child) bool { return o.Name == c.Name && o.Namespace == c.Namespace }
}
