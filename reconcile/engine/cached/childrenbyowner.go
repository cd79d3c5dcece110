package cached

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ChildrenByOwner holds a child informer's children by the UID of their controller owner. The
// informer's one event handler keeps it, before it routes the event, so a reconcile that an event
// queued reads the children as of that event at least. A client-go index would keep a set (a
// map) per owner, and an owner has one child of each resource: the sets took more memory than
// the children, and reading one costs a lookup in the store per child.
type ChildrenByOwner struct {
	mu sync.RWMutex
	by map[types.UID][]*Child
}

func NewChildrenByOwner() *ChildrenByOwner {
	return &ChildrenByOwner{by: map[types.UID][]*Child{}}
}

// of returns the children of owner.
func (x *ChildrenByOwner) Of(owner types.UID) []*Child {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Clone(x.by[owner])
}

// set records c, added or changed, in place of old (nil when added): a child whose controller
// owner changed moves to the new owner's.
func (x *ChildrenByOwner) Set(old, c *Child) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old != nil && ControllerOf(old).UID != ControllerOf(c).UID {
		x.remove(old)
	}
	owner := ControllerOf(c).UID
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
func (x *ChildrenByOwner) Delete(c *Child) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(c)
}

// remove forgets c; x.mu is held.
func (x *ChildrenByOwner) remove(c *Child) {
	owner := ControllerOf(c).UID
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

// OwnedBy returns the children whose controller owner has the UID owner, each the index's or its
// newer write in written, with those written but not in the index yet.
func (x *ChildrenByOwner) OwnedBy(owner types.UID, written *RecentWrites) []*Child {
	indexed := x.Of(owner)
	unseen := written.OwnedBy(string(owner))
	out := make([]*Child, 0, len(indexed)+len(unseen))
	for _, c := range indexed {
		key := c.Namespace + "/" + c.Name
		delete(unseen, key)
		out = append(out, written.Newer(key, c).(*Child))
	}
	for _, w := range unseen {
		out = append(out, w.(*Child))
	}
	return out
}
