package cached

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func writtenObject(name, version, owner string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetNamespace("ns")
	u.SetName(name)
	u.SetResourceVersion(version)
	if owner != "" {
		yes := true
		u.SetOwnerReferences([]metav1.OwnerReference{{Kind: "Evaluator", Name: "e", UID: types.UID(owner), Controller: &yes}})
	}
	return u
}

func TestRecentWrites(t *testing.T) {
	for name, tc := range map[string]struct {
		written []*unstructured.Unstructured
		seen    []*unstructured.Unstructured
		cached  *unstructured.Unstructured
		// wantVersion is what newer returns for ns/a when cached is set; wantOwned the number
		// of remembered children of owner u1
		wantVersion string
		wantOwned   int
		// wantEcho is what the last seen reports: the operator's own write coming back
		wantEcho bool
	}{
		"a write newer than the cache is read": {
			written: []*unstructured.Unstructured{writtenObject("a", "12", "u1")}, cached: writtenObject("a", "10", "u1"),
			wantVersion: "12", wantOwned: 1,
		},
		"a write the cache passed is not": {
			written: []*unstructured.Unstructured{writtenObject("a", "12", "u1")}, cached: writtenObject("a", "13", "u1"),
			wantVersion: "13", wantOwned: 1,
		},
		"a created child is read before the informer shows it": {
			written:   []*unstructured.Unstructured{writtenObject("a", "12", "u1")},
			wantOwned: 1,
		},
		"the informer showing the write forgets it, an echo": {
			written: []*unstructured.Unstructured{writtenObject("a", "12", "u1")}, seen: []*unstructured.Unstructured{writtenObject("a", "12", "u1")},
			wantOwned: 0, wantEcho: true,
		},
		"a newer version forgets it too, and is news": {
			written: []*unstructured.Unstructured{writtenObject("a", "12", "u1")}, seen: []*unstructured.Unstructured{writtenObject("a", "13", "u1")},
			wantOwned: 0,
		},
		"an older event does not": {
			written: []*unstructured.Unstructured{writtenObject("a", "12", "u1")}, seen: []*unstructured.Unstructured{writtenObject("a", "11", "u1")},
			cached: writtenObject("a", "11", "u1"), wantVersion: "12", wantOwned: 1,
		},
		"an older write does not replace a newer one": {
			written: []*unstructured.Unstructured{writtenObject("a", "12", "u1"), writtenObject("a", "11", "u1")},
			cached:  writtenObject("a", "10", "u1"), wantVersion: "12", wantOwned: 1,
		},
		"children are found by their owner only": {
			written:   []*unstructured.Unstructured{writtenObject("a", "12", "u1"), writtenObject("b", "3", "u2"), writtenObject("c", "4", "")},
			wantOwned: 1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := NewRecentWrites()
			for _, o := range tc.written {
				w.Remember(o)
			}
			echo := false
			for _, o := range tc.seen {
				echo = w.Seen(o)
			}
			if echo != tc.wantEcho {
				t.Errorf("seen reported echo %v, want %v", echo, tc.wantEcho)
			}
			if tc.cached != nil {
				if v := w.Newer("ns/a", tc.cached).GetResourceVersion(); v != tc.wantVersion {
					t.Errorf("newer: got version %q, want %q", v, tc.wantVersion)
				}
			}
			if n := len(w.OwnedBy("u1")); n != tc.wantOwned {
				t.Errorf("ownedBy: got %d, want %d", n, tc.wantOwned)
			}
		})
	}
}
