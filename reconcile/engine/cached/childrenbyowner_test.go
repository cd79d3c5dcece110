package cached

import (
	"slices"
	"testing"
	"unique"

	"k8s.io/apimachinery/pkg/types"
)

// cachedChildOf is a cached child named name in namespace ns, at version, whose controller owner
// has the UID owner ("" for none).
func cachedChildOf(name, version, owner string) *Child {
	c := &Child{cachedMeta: cachedMeta{Name: name, Namespace: "ns", ResourceVersion: version}}
	if owner != "" {
		c.controller = unique.Make(ControllerRef{Kind: "Evaluator", Name: "e", UID: types.UID(owner)})
	}
	return c
}

// childEvent is an informer event of a child: added (old nil), changed, or deleted.
type childEvent struct {
	old, obj *Child
	deleted  bool
}

// TestOwnedBy reads an owner's children as the informer's handler kept them through its events,
// with the operator's written children the informer has not shown yet.
func TestOwnedBy(t *testing.T) {
	a1, a2 := cachedChildOf("a", "1", "o1"), cachedChildOf("a", "2", "o1")
	for name, tc := range map[string]struct {
		events  []childEvent
		written []*Child
		owner   string
		want    []string // names@versions, sorted
	}{
		"its children": {
			events: []childEvent{{obj: a1}, {obj: cachedChildOf("b", "1", "o1")}}, owner: "o1",
			want: []string{"a@1", "b@1"},
		},
		"not another owner's": {
			events: []childEvent{{obj: a1}, {obj: cachedChildOf("b", "1", "o2")}}, owner: "o1",
			want: []string{"a@1"},
		},
		"none of an owner with none, nor a child without an owner": {
			events: []childEvent{{obj: a1}, {obj: cachedChildOf("orphan", "1", "")}}, owner: "o3",
		},
		"a changed child at its new version": {
			events: []childEvent{{obj: a1}, {old: a1, obj: a2}}, owner: "o1",
			want: []string{"a@2"},
		},
		"a deleted child is gone": {
			events: []childEvent{{obj: a1}, {obj: cachedChildOf("b", "1", "o1")}, {obj: a2, deleted: true}}, owner: "o1",
			want: []string{"b@1"},
		},
		"a child whose owner changed is the new owner's": {
			events: []childEvent{{obj: a1}, {old: a1, obj: cachedChildOf("a", "2", "o2")}}, owner: "o2",
			want: []string{"a@2"},
		},
		"and no longer the old owner's": {
			events: []childEvent{{obj: a1}, {old: a1, obj: cachedChildOf("a", "2", "o2")}}, owner: "o1",
		},
		"a child added twice is held once": {
			events: []childEvent{{obj: a1}, {obj: a2}}, owner: "o1",
			want: []string{"a@2"},
		},
		"a newer write over the cached child": {
			events: []childEvent{{obj: a1}}, written: []*Child{a2}, owner: "o1",
			want: []string{"a@2"},
		},
		"a written child the informer has not shown": {
			events: []childEvent{{obj: a1}}, written: []*Child{cachedChildOf("b", "5", "o1"), cachedChildOf("c", "5", "o2")}, owner: "o1",
			want: []string{"a@1", "b@5"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			index, written := NewChildrenByOwner(), NewRecentWrites()
			for _, ev := range tc.events {
				if ev.deleted {
					index.Delete(ev.obj)
				} else {
					index.Set(ev.old, ev.obj)
				}
			}
			for _, c := range tc.written {
				written.Remember(c)
			}
			var got []string
			for _, c := range index.OwnedBy(types.UID(tc.owner), written) {
				got = append(got, c.Name+"@"+c.ResourceVersion)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
