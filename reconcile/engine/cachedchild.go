package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/evalsi"
)

// Child is what the engine keeps of a child in its caches, about 200 bytes where the object
// decoded takes tens of kilobytes: its type, identity, controller owner and spec hash; the
// fields the operator's apply set (its managed-fields entry), which the drift check holds the
// rendering to; and of a Deployment the replicas and counts its rollout is read from. It is never
// written back: every apply sends the rendering.
type Child struct {
	cachedMeta
	// controller is the controller owner's reference (zero when it has none), interned: a
	// rendering's children share one. Other owners are not kept: the engine reads none.
	controller unique.Handle[controllerRef]
	// specHash is the child's spec-hash annotation: the rendering it was applied from.
	specHash string
	// owned is the FieldsV1 JSON of the operator's apply with the controller owner's UID replaced
	// by ownerPlaceholder, interned: children rendered alike share one copy. It is the zero
	// Handle when the operator never applied this child (or another manager took every field).
	owned unique.Handle[string]
	// deployment is nil for other kinds.
	deployment *deployment
}

// deployment is what a Child keeps of a Deployment: its spec.replicas (nil when unset) and the
// status counts RolloutOf reads.
type deployment struct {
	replicas *int64
	status   rolloutCounts
}

// controllerRef is a controller owner's reference as a Child keeps it (without
// blockOwnerDeletion, which the engine does not read).
type controllerRef struct {
	APIVersion, Kind, Name string
	UID                    types.UID
}

// GetOwnerReferences returns the controller owner's reference, the only one a Child keeps.
func (c *Child) GetOwnerReferences() []metav1.OwnerReference {
	if c.controller == (unique.Handle[controllerRef]{}) {
		return nil
	}
	r := c.controller.Value()
	return []metav1.OwnerReference{{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID, Controller: new(true)}}
}

// controllerOf returns obj's controller owner's reference (zero when it has none); of a Child
// without building a metav1.OwnerReference.
func controllerOf(obj metav1.Object) controllerRef {
	if c, ok := obj.(*Child); ok {
		if c.controller == (unique.Handle[controllerRef]{}) {
			return controllerRef{}
		}
		return c.controller.Value()
	}
	return controllerIn(obj.GetOwnerReferences())
}

// controllerIn returns the controller owner's reference among refs (zero when none is).
func controllerIn(refs []metav1.OwnerReference) controllerRef {
	for _, r := range refs {
		if r.Controller != nil && *r.Controller {
			return controllerRef{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID}
		}
	}
	return controllerRef{}
}

// rolloutCounts are the Deployment status fields a rollout is read from (absent reads as 0).
type rolloutCounts struct {
	ObservedGeneration int64 `json:"observedGeneration"`
	Replicas           int64 `json:"replicas"`
	ReadyReplicas      int64 `json:"readyReplicas"`
	UpdatedReplicas    int64 `json:"updatedReplicas"`
	AvailableReplicas  int64 `json:"availableReplicas"`
}

// ownerPlaceholder stands for the controller owner's UID in an interned field set.
const ownerPlaceholder = "<controller-owner-uid>"

// childJSON is a child as the API server sends it (an object, or a watch event's object),
// decoded only as far as a Child reads: encoding/json skips the rest without building it,
// which costs a fraction of decoding the whole object into maps. The Code, Reason and Message of
// a Status (a watch's ERROR event) are decoded too; a Status's "status" is a string, a child's an
// object, so status is kept raw and read for Deployments only.
type childJSON struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		objectIdentity
		Annotations       map[string]string       `json:"annotations"`
		OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
		DeletionTimestamp *metav1.Time            `json:"deletionTimestamp"`
		ManagedFields     []struct {
			Manager     string          `json:"manager"`
			Operation   string          `json:"operation"`
			Subresource string          `json:"subresource"`
			FieldsV1    json.RawMessage `json:"fieldsV1"`
		} `json:"managedFields"`
	} `json:"metadata"`
	Spec struct {
		Replicas *int64 `json:"replicas"`
	} `json:"spec"`
	Status  json.RawMessage     `json:"status"`
	Code    int32               `json:"code"`
	Reason  metav1.StatusReason `json:"reason"`
	Message string              `json:"message"`
}

// objectIdentity is an object's identity as its JSON metadata carries it.
type objectIdentity struct {
	Name            string    `json:"name"`
	Namespace       string    `json:"namespace"`
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
	Generation      int64     `json:"generation"`
}

// decodeChild decodes a child's JSON into what the engine keeps of it.
func decodeChild(raw []byte) (*Child, error) {
	var j childJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("decoding a child: %w", err)
	}
	return j.cached()
}

// cached returns what the engine keeps of j.
func (j *childJSON) cached() (*Child, error) {
	m := &j.Metadata
	c := &Child{cachedMeta: m.cachedMeta(j.APIVersion, j.Kind)}
	c.DeletionTimestamp = m.DeletionTimestamp
	if ref := controllerIn(m.OwnerReferences); ref.UID != "" {
		c.controller = unique.Make(ref)
	}
	c.specHash = m.Annotations[evalsi.AnnotationSpecHash]
	if end, ok := m.Annotations[metav1.InitialEventsAnnotationKey]; ok {
		c.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: end}
	}
	for _, e := range m.ManagedFields {
		if e.Manager != FieldManager || e.Operation != string(metav1.ManagedFieldsOperationApply) || e.Subresource != "" {
			continue
		}
		owned := string(e.FieldsV1)
		if uid := controllerOf(c).UID; uid != "" {
			owned = strings.ReplaceAll(owned, string(uid), ownerPlaceholder)
		}
		c.owned = unique.Make(owned)
	}
	if j.Kind != "Deployment" {
		return c, nil
	}
	c.deployment = &deployment{replicas: j.Spec.Replicas}
	if len(j.Status) == 0 {
		return c, nil
	}
	if err := json.Unmarshal(j.Status, &c.deployment.status); err != nil {
		return nil, fmt.Errorf("decoding the status of Deployment %s/%s: %w", c.Namespace, c.Name, err)
	}
	return c, nil
}

// intern returns the one copy of s kept for all children: kinds, API versions and namespaces
// repeat across thousands of them.
func intern(s string) string { return unique.Make(s).Value() }

// DeepCopyObject returns a copy of c (a Child is a runtime.Object, as the informer
// machinery needs); the interned owner and field set are shared, as they never change.
func (c *Child) DeepCopyObject() runtime.Object {
	out := *c
	out.cachedMeta = c.cachedMeta.deepCopy()
	if c.deployment != nil {
		d := *c.deployment
		if d.replicas != nil {
			r := *d.replicas
			d.replicas = &r
		}
		out.deployment = &d
	}
	return &out
}

// unowned returns the first field that want sets and the operator's apply no longer owns (another
// writer changed it, which moves its ownership to that writer), or "" when it owns them all.
// Server-side apply keeps a field's value while its owner does, so ownership is the drift check:
// it needs no copy of the values, and a value the API server normalizes is not drift.
func (c *Child) unowned(want *unstructured.Unstructured) string {
	if c.owned == (unique.Handle[string]{}) {
		return "."
	}
	owned := c.owned.Value()
	if uid := controllerOf(c).UID; uid != "" {
		owned = strings.ReplaceAll(owned, ownerPlaceholder, string(uid))
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(owned), &fields); err != nil {
		return "."
	}
	// The type and the name identify the object; field sets do not list them.
	top := maps.Clone(want.Object)
	delete(top, "apiVersion")
	delete(top, "kind")
	if meta, ok := top["metadata"].(map[string]any); ok {
		meta = maps.Clone(meta)
		delete(meta, "name")
		delete(meta, "namespace")
		top["metadata"] = meta
	}
	return uncoveredValue(fields, top, "")
}

// uncovered returns the path of the first field under key (with value v) that the field set fs
// (a FieldsV1 object) does not hold, or "". Empty values are not compared (an apply of an empty
// list or map may leave no field); a field set entry with nothing under it holds its whole
// value (an atomic list or map). List elements are found by their keys ("k:{...}", matched on the
// key fields the element has), their value ("v:...") or their index ("i:N").
func uncovered(fs map[string]any, key string, v any, path string) string {
	path += "." + key
	if empty(v) {
		return ""
	}
	sub, ok := fs["f:"+key].(map[string]any)
	if !ok {
		return path
	}
	return uncoveredValue(sub, v, path)
}

func uncoveredValue(fs map[string]any, v any, path string) string {
	if len(fs) == 0 || len(fs) == 1 && fs["."] != nil {
		return "" // the whole value is owned
	}
	switch w := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if p := uncovered(fs, k, w[k], path); p != "" {
				return p
			}
		}
	case []any:
		for i, el := range w {
			sub := elementFields(fs, el, i)
			if sub == nil {
				return fmt.Sprintf("%s[%d]", path, i)
			}
			if p := uncoveredValue(sub, el, fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	}
	return ""
}

// elementFields returns the field set of list element el (the i-th), or nil when fs has none:
// an object by its key fields, a scalar by its value, either by its index.
func elementFields(fs map[string]any, el any, i int) map[string]any {
	if sub, ok := fs[fmt.Sprintf("i:%d", i)].(map[string]any); ok {
		return sub
	}
	m, isMap := el.(map[string]any)
	if !isMap {
		raw, _ := json.Marshal(el)
		sub, _ := fs["v:"+string(raw)].(map[string]any)
		return sub
	}
	for k, sub := range fs {
		keyJSON, ok := strings.CutPrefix(k, "k:")
		if !ok {
			continue
		}
		var keyFields map[string]any
		if json.Unmarshal([]byte(keyJSON), &keyFields) != nil {
			continue
		}
		if keyMatches(keyFields, m) {
			s, _ := sub.(map[string]any)
			return s
		}
	}
	return nil
}

// keyMatches reports whether element m has the values of keyFields, for the key fields it sets
// (a key field the API server defaulted, such as a port's protocol, is not in the rendering).
func keyMatches(keyFields, m map[string]any) bool {
	matched := 0
	for f, kv := range keyFields {
		ev, ok := m[f]
		if !ok {
			continue
		}
		if en, ok := number(ev); ok {
			if kn, _ := number(kv); kn != en {
				return false
			}
		} else if ev != kv {
			return false
		}
		matched++
	}
	return matched > 0
}

// empty reports whether v is nil or an empty map or list.
func empty(v any) bool {
	switch w := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(w) == 0
	case []any:
		return len(w) == 0
	}
	return false
}

// number returns v as a float64 when it is a JSON number (int64 or float64 in unstructured
// content).
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}
