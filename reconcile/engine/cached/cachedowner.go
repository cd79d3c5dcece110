package cached

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"evals.si/operator/unstructuredjson"
)

// Owner is what the engine keeps of an owner (an object of the operator's kinds) in its
// cache: its identity, for the cache's keys, indexes and versions, and the object as JSON without
// managedFields and kubectl's last-applied copy (pruneOwner). JSON takes a third of the heap of
// the same object decoded into maps, and every reconcile decodes a copy of its own, which it may
// change: the cache is never written through.
type Owner struct {
	cachedMeta
	raw []byte
	// Followed is the kind's Followed verdict of this version (Asks).
	Followed bool
	// Refers are the kind's Refers of this version (Asks), for the referrers index.
	Refers []string
}

// NewOwner keeps of u, an owner as the API server returned it, what the engine reads, and
// what its kind asks of each version (a, nil for nothing); u is pruned in place.
func NewOwner(u *unstructured.Unstructured, a *Asks) (*Owner, error) {
	pruneOwner(u)
	raw, err := unstructuredjson.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s/%s for the cache: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	id := objectIdentity{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion(), Generation: u.GetGeneration()}
	co := &Owner{cachedMeta: id.cachedMeta(u.GetAPIVersion(), u.GetKind()), raw: raw}
	if a != nil && a.Followed != nil {
		co.Followed = a.Followed(u)
	}
	if a != nil && a.Refers != nil {
		co.Refers = a.Refers(u)
	}
	return co, nil
}

// ownerFromJSON keeps of raw, an owner as the API server serves it, what the engine reads, as
// NewOwner does: decoded as a dynamic informer decodes it, pruned, and kept as compact JSON. A
// watch's bookmark keeps its end-of-initial-events annotation, which the reflector reads. (A
// decoder that cut the pruned fields from the JSON without decoding the rest took 1.5 times as
// long for the same bytes kept: BenchmarkDecodersBesideApimachinery, docs/benchmarks.md.)
func ownerFromJSON(raw []byte, a *Asks) (*Owner, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("decoding an owner: %w", err)
	}
	bookmark, isBookmark := u.GetAnnotations()[metav1.InitialEventsAnnotationKey]
	co, err := NewOwner(u, a)
	if err == nil && isBookmark {
		co.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: bookmark}
	}
	return co, err
}

// DecodeOwner keeps raw, an owner as the API server answered a write, as the cache would until
// the informer shows it: its identity is decoded, and the rest stays as it came (pruned when it
// is decoded, by object).
func DecodeOwner(raw []byte) (*Owner, error) {
	var j struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   objectIdentity `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("decoding an owner: %w", err)
	}
	return &Owner{cachedMeta: j.Metadata.cachedMeta(j.APIVersion, j.Kind), raw: raw}, nil
}

// object decodes a copy of the owner.
func (o *Owner) Object() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(o.raw); err != nil {
		return nil, fmt.Errorf("decoding %s %s/%s from the cache: %w", o.Kind(), o.Namespace, o.Name, err)
	}
	pruneOwner(u)
	return u, nil
}

// DeepCopyObject returns a copy of o (a Owner is a runtime.Object, as the informer
// machinery needs); the JSON is shared, as it never changes.
func (o *Owner) DeepCopyObject() runtime.Object {
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

// Form returns what the engine's caches keep of raw, an object as the API server serves
// it (JSON, or protobuf for a built-in child): a Child for a child (one labelled managed-by),
// else the owner's pruned JSON. Benchmarks measure its size.
func Form(raw []byte, child bool) (any, error) {
	if child {
		return DecodeServedChild(raw)
	}
	return ownerFromJSON(raw, nil)
}
