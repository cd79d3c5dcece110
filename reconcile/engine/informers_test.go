package engine

import (
	"slices"
	"testing"
	"unique"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// cachedChildOf is a cached child named name in namespace ns, at version, whose controller owner
// has the UID owner ("" for none).
func cachedChildOf(name, version, owner string) *Child {
	c := &Child{cachedMeta: cachedMeta{Name: name, Namespace: "ns", ResourceVersion: version}}
	if owner != "" {
		c.controller = unique.Make(controllerRef{Kind: "Evaluator", Name: "e", UID: types.UID(owner)})
	}
	return c
}

// TestOwnedBy reads an owner's children from the owner index, whose values are buckets of
// owners: an owner gets its own children, none of another owner's in its bucket, and its
// written children the informer has not shown yet.
func TestOwnedBy(t *testing.T) {
	for name, tc := range map[string]struct {
		cached  []*Child
		written []*Child
		owner   string
		want    []string // names@versions, sorted
	}{
		"its children": {
			cached: []*Child{cachedChildOf("a", "1", "aa-1"), cachedChildOf("b", "1", "aa-1")}, owner: "aa-1",
			want: []string{"a@1", "b@1"},
		},
		"not another owner's in its bucket": {
			cached: []*Child{cachedChildOf("a", "1", "aa-1"), cachedChildOf("b", "1", "aa-2"), cachedChildOf("c", "1", "bb-1")}, owner: "aa-1",
			want: []string{"a@1"},
		},
		"none of an owner with none": {
			cached: []*Child{cachedChildOf("a", "1", "aa-1"), cachedChildOf("orphan", "1", "")}, owner: "aa-3",
		},
		"a short UID is its own bucket": {
			cached: []*Child{cachedChildOf("a", "1", "a"), cachedChildOf("b", "1", "aa-1")}, owner: "a",
			want: []string{"a@1"},
		},
		"a newer write over the cached child": {
			cached: []*Child{cachedChildOf("a", "1", "aa-1")}, written: []*Child{cachedChildOf("a", "2", "aa-1")}, owner: "aa-1",
			want: []string{"a@2"},
		},
		"a written child the informer has not shown": {
			cached: []*Child{cachedChildOf("a", "1", "aa-1")}, written: []*Child{cachedChildOf("b", "5", "aa-1"), cachedChildOf("c", "5", "aa-2")}, owner: "aa-1",
			want: []string{"a@1", "b@5"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			inf := &informer{
				shared:  cache.NewSharedIndexInformer(&cache.ListWatch{}, &Child{}, 0, cache.Indexers{ownerIndex: indexByOwner}),
				written: newRecentWrites(),
			}
			for _, c := range tc.cached {
				if err := inf.shared.GetIndexer().Add(c); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range tc.written {
				inf.written.remember(c)
			}
			children, err := inf.ownedBy(tc.owner)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range children {
				got = append(got, c.Name+"@"+c.ResourceVersion)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
