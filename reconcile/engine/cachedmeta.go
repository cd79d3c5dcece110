package engine

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// cachedMeta is the metadata a cache keeps of an object (a Child, a cachedOwner): its identity,
// whether it is being deleted, and annotations only on a watch's bookmark (the end of its initial
// events, which the reflector reads). It is a metav1.Object, as the informer machinery needs, at
// 88 bytes where a metav1.ObjectMeta takes 232 for fields the engine never reads. Nothing writes
// through a cache, so the setters of fields it does not keep panic rather than drop the value.
type cachedMeta struct {
	Name              string
	Namespace         string // interned
	UID               types.UID
	ResourceVersion   string
	Generation        int64
	DeletionTimestamp *metav1.Time
	Annotations       map[string]string
}

// cachedMeta returns the identity as a cache keeps it, the namespace interned.
func (id objectIdentity) cachedMeta() cachedMeta {
	return cachedMeta{Name: id.Name, Namespace: intern(id.Namespace), UID: id.UID, ResourceVersion: id.ResourceVersion, Generation: id.Generation}
}

// deepCopy returns a copy of m that shares nothing mutable with it.
func (m *cachedMeta) deepCopy() cachedMeta {
	out := *m
	if m.DeletionTimestamp != nil {
		t := *m.DeletionTimestamp
		out.DeletionTimestamp = &t
	}
	if m.Annotations != nil {
		out.Annotations = make(map[string]string, len(m.Annotations))
		for k, v := range m.Annotations {
			out.Annotations[k] = v
		}
	}
	return out
}

func (m *cachedMeta) GetNamespace() string                        { return m.Namespace }
func (m *cachedMeta) SetNamespace(namespace string)               { m.Namespace = intern(namespace) }
func (m *cachedMeta) GetName() string                             { return m.Name }
func (m *cachedMeta) SetName(name string)                         { m.Name = name }
func (m *cachedMeta) GetUID() types.UID                           { return m.UID }
func (m *cachedMeta) SetUID(uid types.UID)                        { m.UID = uid }
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
