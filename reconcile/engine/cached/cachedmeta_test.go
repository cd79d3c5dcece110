package cached

import (
	"testing"
	"unique"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// metadataOf returns what a cached object gives of its type and metadata through the interfaces
// the informer machinery reads, as plain values to compare.
func metadataOf(t testing.TB, obj runtime.Object) *metav1.PartialObjectMetadata {
	t.Helper()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	p := meta.AsPartialObjectMetadata(m)
	p.APIVersion, p.Kind = obj.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind()
	return p
}

// TestCompactUID keeps a UID as it was given, in 16 bytes when it is a UUID as the API server
// makes them.
func TestCompactUID(t *testing.T) {
	for name, tc := range map[string]struct {
		uid     types.UID
		compact bool
	}{
		"none":              {uid: ""},
		"an API server's":   {uid: "0b6c1f5e-6d3a-4c8e-9f1a-2b3c4d5e6f70", compact: true},
		"uppercase":         {uid: "0B6C1F5E-6D3A-4C8E-9F1A-2B3C4D5E6F70"},
		"the nil UUID":      {uid: "00000000-0000-0000-0000-000000000000"},
		"a trailing byte":   {uid: "0b6c1f5e-6d3a-4c8e-9f1a-2b3c4d5e6f70a"},
		"a short last part": {uid: "0b6c1f5e-6d3a-4c8e-9f1a-2b3c4d5e6f7"},
		"no hyphens":        {uid: "0b6c1f5e6d3a4c8e9f1a2b3c4d5e6f70"},
		"a hyphen moved":    {uid: "0b6c1f5-e6d3a-4c8e-9f1a-2b3c4d5e6f70"},
		"not hex":           {uid: "0b6c1f5e-6d3a-4c8e-9f1a-2b3c4d5e6fzz"},
		"any other string":  {uid: "u1"},
	} {
		t.Run(name, func(t *testing.T) {
			u := newCompactUID(tc.uid)
			if got := u.UID(); got != tc.uid {
				t.Errorf("UID() = %q, want %q", got, tc.uid)
			}
			if compact := u.other == (unique.Handle[types.UID]{}) && tc.uid != ""; compact != tc.compact {
				t.Errorf("kept compact: %v, want %v", compact, tc.compact)
			}
		})
	}
}

// FuzzCompactUID: any UID reads back as it was given.
func FuzzCompactUID(f *testing.F) {
	f.Add("0b6c1f5e-6d3a-4c8e-9f1a-2b3c4d5e6f70")
	f.Add("00000000-0000-0000-0000-000000000000")
	f.Add("u1")
	f.Fuzz(func(t *testing.T, uid string) {
		if got := newCompactUID(types.UID(uid)).UID(); got != types.UID(uid) {
			t.Errorf("UID() = %q, want %q", got, uid)
		}
	})
}

// TestCachedMetaReadOnly: a cache keeps no labels, finalizers or the like, and nothing writes
// through it; setting one panics instead of dropping the value.
func TestCachedMetaReadOnly(t *testing.T) {
	for name, set := range map[string]func(m metav1.Object){
		"labels":          func(m metav1.Object) { m.SetLabels(map[string]string{"a": "b"}) },
		"finalizers":      func(m metav1.Object) { m.SetFinalizers([]string{"f"}) },
		"ownerReferences": func(m metav1.Object) { m.SetOwnerReferences(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			set(&Child{})
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("setting the type did not panic")
		}
	}()
	(&Owner{}).GetObjectKind().SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("Status"))
}
