package cached

import (
	"encoding/hex"
	"maps"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// cachedMeta is the metadata a cache keeps of an object (a Child, a Owner): its type and
// identity, whether it is being deleted, and annotations only on a watch's bookmark (the end of
// its initial events, which the reflector reads). It is a metav1.Object and answers
// runtime.Object's GetObjectKind, as the informer machinery needs, in 104 bytes where a
// metav1.TypeMeta and metav1.ObjectMeta take 264 and a UID's string 48 more. Nothing writes
// through a cache, so the setters of what it does not keep panic rather than drop the value.
type cachedMeta struct {
	typ               unique.Handle[metav1.TypeMeta]
	Name              string
	Namespace         string // interned
	uid               compactUID
	ResourceVersion   string
	Generation        int64
	DeletionTimestamp *metav1.Time
	Annotations       map[string]string
}

// cachedMeta returns the identity of an object of apiVersion and kind as a cache keeps it.
func (id objectIdentity) cachedMeta(apiVersion, kind string) cachedMeta {
	return cachedMeta{typ: unique.Make(metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}), Name: id.Name, Namespace: intern(id.Namespace),
		uid: newCompactUID(id.UID), ResourceVersion: id.ResourceVersion, Generation: id.Generation}
}

// deepCopy returns a copy of m that shares nothing mutable with it.
func (m *cachedMeta) deepCopy() cachedMeta {
	out := *m
	if m.DeletionTimestamp != nil {
		t := *m.DeletionTimestamp
		out.DeletionTimestamp = &t
	}
	out.Annotations = maps.Clone(m.Annotations)
	return out
}

// apiVersion and kind are the object's type.
func (m *cachedMeta) APIVersion() string { return m.typ.Value().APIVersion }
func (m *cachedMeta) Kind() string       { return m.typ.Value().Kind }

// GetObjectKind returns the object's type; it cannot be set.
func (m *cachedMeta) GetObjectKind() schema.ObjectKind { return &fixedKind{m.typ.Value()} }

// fixedKind is a cached object's type as runtime.Object gives it.
type fixedKind struct{ metav1.TypeMeta }

// SetGroupVersionKind panics: a cached object's type is its resource's.
func (k *fixedKind) SetGroupVersionKind(schema.GroupVersionKind) { notKept("its type") }

// compactUID is a UID in 16 bytes when it is a UUID in the form the API server makes them
// (lowercase, hyphenated), interned otherwise: a UID's string takes 48 bytes more.
type compactUID struct {
	uuid  [16]byte
	other unique.Handle[types.UID] // zero when the UID is a UUID, or none (then uuid is zero too)
}

// uuidGroups are the lengths, in hex digits, of a UUID's hyphen-separated groups.
var uuidGroups = [...]int{8, 4, 4, 4, 12}

// newCompactUID returns uid in its compact form.
func newCompactUID(uid types.UID) compactUID {
	var u compactUID
	if uid == "" {
		return u
	}
	s, at := string(uid), 0
	for i, n := range uuidGroups {
		if i > 0 {
			if s == "" || s[0] != '-' {
				return otherUID(uid)
			}
			s = s[1:]
		}
		if len(s) < n {
			return otherUID(uid)
		}
		if _, err := hex.Decode(u.uuid[at:at+n/2], []byte(s[:n])); err != nil {
			return otherUID(uid)
		}
		at, s = at+n/2, s[n:]
	}
	// Only what reads back the same is kept compact: not an uppercase UUID, not trailing bytes,
	// not the nil UUID (the zero form is no UID).
	if s != "" || u.uuid == [16]byte{} || u.UID() != uid {
		return otherUID(uid)
	}
	return u
}

// otherUID is uid, which is not a UUID in the API server's form, in its compact form.
func otherUID(uid types.UID) compactUID { return compactUID{other: unique.Make(uid)} }

// UID returns the UID as it was given.
func (u compactUID) UID() types.UID {
	if u.other != (unique.Handle[types.UID]{}) {
		return u.other.Value()
	}
	if u.uuid == [16]byte{} {
		return ""
	}
	var b [36]byte
	at, from := 0, 0
	for i, n := range uuidGroups {
		if i > 0 {
			b[at] = '-'
			at++
		}
		hex.Encode(b[at:at+n], u.uuid[from:from+n/2])
		at, from = at+n, from+n/2
	}
	return types.UID(b[:])
}

func (m *cachedMeta) GetNamespace() string                        { return m.Namespace }
func (m *cachedMeta) SetNamespace(namespace string)               { m.Namespace = intern(namespace) }
func (m *cachedMeta) GetName() string                             { return m.Name }
func (m *cachedMeta) SetName(name string)                         { m.Name = name }
func (m *cachedMeta) GetUID() types.UID                           { return m.uid.UID() }
func (m *cachedMeta) SetUID(uid types.UID)                        { m.uid = newCompactUID(uid) }
func (m *cachedMeta) GetResourceVersion() string                  { return m.ResourceVersion }
func (m *cachedMeta) SetResourceVersion(version string)           { m.ResourceVersion = version }
func (m *cachedMeta) GetGeneration() int64                        { return m.Generation }
func (m *cachedMeta) SetGeneration(generation int64)              { m.Generation = generation }
func (m *cachedMeta) GetDeletionTimestamp() *metav1.Time          { return m.DeletionTimestamp }
func (m *cachedMeta) SetDeletionTimestamp(t *metav1.Time)         { m.DeletionTimestamp = t }
func (m *cachedMeta) GetAnnotations() map[string]string           { return m.Annotations }
func (m *cachedMeta) SetAnnotations(a map[string]string)          { m.Annotations = a }
func (m *cachedMeta) GetGenerateName() string                     { return "" }
func (m *cachedMeta) GetSelfLink() string                         { return "" }
func (m *cachedMeta) GetCreationTimestamp() metav1.Time           { return metav1.Time{} }
func (m *cachedMeta) GetDeletionGracePeriodSeconds() *int64       { return nil }
func (m *cachedMeta) GetLabels() map[string]string                { return nil }
func (m *cachedMeta) GetFinalizers() []string                     { return nil }
func (m *cachedMeta) GetOwnerReferences() []metav1.OwnerReference { return nil }
func (m *cachedMeta) GetManagedFields() []metav1.ManagedFieldsEntry {
	return nil
}

func (m *cachedMeta) SetGenerateName(string)                     { notKept("generateName") }
func (m *cachedMeta) SetSelfLink(string)                         { notKept("selfLink") }
func (m *cachedMeta) SetCreationTimestamp(metav1.Time)           { notKept("creationTimestamp") }
func (m *cachedMeta) SetDeletionGracePeriodSeconds(*int64)       { notKept("deletionGracePeriodSeconds") }
func (m *cachedMeta) SetLabels(map[string]string)                { notKept("labels") }
func (m *cachedMeta) SetFinalizers([]string)                     { notKept("finalizers") }
func (m *cachedMeta) SetOwnerReferences([]metav1.OwnerReference) { notKept("ownerReferences") }
func (m *cachedMeta) SetManagedFields([]metav1.ManagedFieldsEntry) {
	notKept("managedFields")
}

// notKept panics: something set a metadata field a cache does not keep, which would be lost.
func notKept(field string) {
	panic("engine: a cached object keeps no metadata." + field + "; nothing may write through a cache")
}
