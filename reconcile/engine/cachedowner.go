package engine

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"evals.si/operator/unstructuredjson"
)

// cachedOwner is what the engine keeps of an owner (an object of the operator's kinds) in its
// cache: its identity, for the cache's keys, indexes and versions, and the object as JSON without
// managedFields and kubectl's last-applied copy (pruneOwner). JSON takes a third of the heap of
// the same object decoded into maps, and every reconcile decodes a copy of its own, which it may
// change: the cache is never written through.
type cachedOwner struct {
	cachedMeta
	raw []byte
	// followed is the kind's Followed verdict of this version.
	followed bool
	// refers are the kind's Refers of this version (Ref.String), for the referrers index.
	refers []string
}

// newCachedOwner keeps of u, an owner as the API server returned it, what the engine reads, and
// what its kind k (nil: none) asks of each version (Followed, Refers); u is pruned in place.
func newCachedOwner(u *unstructured.Unstructured, k *Kind) (*cachedOwner, error) {
	pruneOwner(u)
	raw, err := unstructuredjson.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s/%s for the cache: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	id := objectIdentity{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion(), Generation: u.GetGeneration()}
	co := &cachedOwner{cachedMeta: id.cachedMeta(u.GetAPIVersion(), u.GetKind()), raw: raw}
	if k != nil && k.Followed != nil {
		co.followed = k.Followed(u)
	}
	if k != nil && k.Refers != nil {
		for _, r := range k.Refers(u) {
			co.refers = append(co.refers, r.String())
		}
	}
	return co, nil
}

// cachedOwnerFromJSON keeps of raw, an owner of kind k (nil: none) as the API server serves it,
// what the engine reads, as newCachedOwner does. Only a kind that asks something of each version
// (Followed, Refers) has it decoded whole; of the others only the identity and metadata are
// decoded, and managedFields and kubectl's copy cut from the JSON, the rest kept as it came. A
// watch's bookmark keeps its end-of-initial-events annotation, which the reflector reads.
func cachedOwnerFromJSON(raw []byte, k *Kind) (*cachedOwner, error) {
	if k != nil && (k.Followed != nil || k.Refers != nil) {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("decoding an owner: %w", err)
		}
		bookmark, isBookmark := u.GetAnnotations()[metav1.InitialEventsAnnotationKey]
		co, err := newCachedOwner(u, k)
		if err == nil && isBookmark {
			co.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: bookmark}
		}
		return co, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("decoding an owner: %w", err)
	}
	var apiVersion, kind string
	var metadata map[string]json.RawMessage
	var id objectIdentity
	var annotations map[string]string
	decode := func(fields map[string]json.RawMessage, into map[string]any) error {
		for key, to := range into {
			if v := fields[key]; len(v) > 0 {
				if err := json.Unmarshal(v, to); err != nil {
					return fmt.Errorf("decoding an owner's %s: %w", key, err)
				}
			}
		}
		return nil
	}
	if err := decode(top, map[string]any{"apiVersion": &apiVersion, "kind": &kind, "metadata": &metadata}); err != nil {
		return nil, err
	}
	if err := decode(metadata, map[string]any{"name": &id.Name, "namespace": &id.Namespace, "uid": &id.UID,
		"resourceVersion": &id.ResourceVersion, "generation": &id.Generation, "annotations": &annotations}); err != nil {
		return nil, err
	}
	delete(metadata, "managedFields")
	if _, ok := annotations[lastAppliedAnnotation]; ok {
		delete(annotations, lastAppliedAnnotation)
		delete(metadata, "annotations")
		if len(annotations) > 0 {
			metadata["annotations"], _ = json.Marshal(annotations)
		}
	}
	if metadata != nil {
		var err error
		if top["metadata"], err = json.Marshal(metadata); err != nil {
			return nil, fmt.Errorf("encoding an owner's metadata: %w", err)
		}
	}
	pruned, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("encoding an owner for the cache: %w", err)
	}
	co := &cachedOwner{cachedMeta: id.cachedMeta(apiVersion, kind), raw: pruned}
	if end, ok := annotations[metav1.InitialEventsAnnotationKey]; ok {
		co.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: end}
	}
	return co, nil
}

// decodeOwner keeps raw, an owner as the API server answered a write, as the cache would until
// the informer shows it: its identity is decoded, and the rest stays as it came (pruned when it
// is decoded, by object).
func decodeOwner(raw []byte) (*cachedOwner, error) {
	var j struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   objectIdentity `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("decoding an owner: %w", err)
	}
	return &cachedOwner{cachedMeta: j.Metadata.cachedMeta(j.APIVersion, j.Kind), raw: raw}, nil
}

// object decodes a copy of the owner.
func (o *cachedOwner) object() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(o.raw); err != nil {
		return nil, fmt.Errorf("decoding %s %s/%s from the cache: %w", o.kind(), o.Namespace, o.Name, err)
	}
	pruneOwner(u)
	return u, nil
}

// DeepCopyObject returns a copy of o (a cachedOwner is a runtime.Object, as the informer
// machinery needs); the JSON is shared, as it never changes.
func (o *cachedOwner) DeepCopyObject() runtime.Object {
	out := *o
	out.cachedMeta = o.cachedMeta.deepCopy()
	return &out
}

// lastAppliedAnnotation is kubectl apply's copy of the whole object, as large as the object.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// pruneOwner drops from an owner what the engine never reads: managedFields and kubectl's
// last-applied copy.
func pruneOwner(u *unstructured.Unstructured) {
	meta, _ := u.Object["metadata"].(map[string]any)
	delete(meta, "managedFields")
	if annotations, _ := meta["annotations"].(map[string]any); annotations != nil {
		delete(annotations, lastAppliedAnnotation)
		if len(annotations) == 0 {
			delete(meta, "annotations")
		}
	}
}

// CachedForm returns what the engine's caches keep of raw, an object as the API server serves
// it (JSON, or protobuf for a built-in child): a Child for a child (one labelled managed-by),
// else the owner's pruned JSON. Benchmarks measure its size.
func CachedForm(raw []byte, child bool) (any, error) {
	if child {
		return decodeServedChild(raw)
	}
	return cachedOwnerFromJSON(raw, nil)
}
