package cached

import (
	"encoding/json"
	"fmt"
	"strings"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	controller unique.Handle[ControllerRef]
	// SpecHash is the child's spec-hash annotation: the rendering it was applied from.
	SpecHash string
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

// ControllerRef is a controller owner's reference as a Child keeps it (without
// blockOwnerDeletion, which the engine does not read).
type ControllerRef struct {
	APIVersion, Kind, Name string
	UID                    types.UID
}

// GetOwnerReferences returns the controller owner's reference, the only one a Child keeps.
func (c *Child) GetOwnerReferences() []metav1.OwnerReference {
	if c.controller == (unique.Handle[ControllerRef]{}) {
		return nil
	}
	r := c.controller.Value()
	return []metav1.OwnerReference{{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID, Controller: new(true)}}
}

// ControllerOf returns obj's controller owner's reference (zero when it has none); of a Child
// without building a metav1.OwnerReference.
func ControllerOf(obj metav1.Object) ControllerRef {
	if c, ok := obj.(*Child); ok {
		if c.controller == (unique.Handle[ControllerRef]{}) {
			return ControllerRef{}
		}
		return c.controller.Value()
	}
	return controllerIn(obj.GetOwnerReferences())
}

// controllerIn returns the controller owner's reference among refs (zero when none is).
func controllerIn(refs []metav1.OwnerReference) ControllerRef {
	for _, r := range refs {
		if r.Controller != nil && *r.Controller {
			return ControllerRef{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID}
		}
	}
	return ControllerRef{}
}

// rolloutCounts are the Deployment status fields a rollout is read from (absent reads as 0).
type rolloutCounts struct {
	ObservedGeneration int64 `json:"observedGeneration"`
	Replicas           int64 `json:"replicas"`
	ReadyReplicas      int64 `json:"readyReplicas"`
	UpdatedReplicas    int64 `json:"updatedReplicas"`
	AvailableReplicas  int64 `json:"availableReplicas"`
	// PodsRefused is the message of the Deployment's ReplicaFailure condition while it is True:
	// the API server refuses its pods (a quota, the namespace's PodSecurity level, a LimitRange),
	// which no count says.
	PodsRefused string `json:"-"`
}

// deploymentStatusJSON is a Deployment's status as JSON, as far as a Child reads it.
type deploymentStatusJSON struct {
	rolloutCounts
	Conditions []struct {
		Type    string `json:"type"`
		Status  string `json:"status"`
		Message string `json:"message"`
	} `json:"conditions"`
}

// replicaFailure is the Deployment condition type that says its pods cannot be created.
const replicaFailure = "ReplicaFailure"

// ownerPlaceholder stands for the controller owner's UID in an interned field set.
const ownerPlaceholder = "<controller-owner-uid>"

// childJSON is a child as the API server sends it as JSON (an object, or a watch event's
// object), decoded only as far as a Child reads: encoding/json skips the rest without building
// it, which costs a fraction of decoding the whole object into maps. The protobuf reader
// (childproto.go) fills the same fields. The Code, Reason and Message of a Status (a watch's
// ERROR event) are decoded too; a Status's "status" is a string, a child's an object, so status
// is kept raw and read for Deployments only.
type childJSON struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   childMetadata `json:"metadata"`
	Spec       struct {
		Replicas *int64 `json:"replicas"`
	} `json:"spec"`
	Status  json.RawMessage     `json:"status"`
	Code    int32               `json:"code"`
	Reason  metav1.StatusReason `json:"reason"`
	Message string              `json:"message"`
	// rollout is a Deployment's status counts when they were decoded with the rest (from
	// protobuf); from JSON they are read from Status.
	rollout *rolloutCounts
}

// childMetadata is the metadata of a child as far as a Child reads it.
type childMetadata struct {
	objectIdentity
	Annotations       map[string]string       `json:"annotations"`
	OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
	DeletionTimestamp *metav1.Time            `json:"deletionTimestamp"`
	ManagedFields     []managedFieldsJSON     `json:"managedFields"`
}

// managedFieldsJSON is a managed-fields entry as far as a Child reads it.
type managedFieldsJSON struct {
	Manager     string          `json:"manager"`
	Operation   string          `json:"operation"`
	Subresource string          `json:"subresource"`
	FieldsV1    json.RawMessage `json:"fieldsV1"`
}

// objectIdentity is an object's identity as its JSON metadata carries it.
type objectIdentity struct {
	Name            string    `json:"name"`
	Namespace       string    `json:"namespace"`
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
	Generation      int64     `json:"generation"`
}

// DecodeChild decodes a child's JSON into what the engine keeps of it.
func DecodeChild(raw []byte) (*Child, error) {
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
	c.SpecHash = m.Annotations[evalsi.AnnotationSpecHash]
	if end, ok := m.Annotations[metav1.InitialEventsAnnotationKey]; ok {
		c.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: end}
	}
	for _, e := range m.ManagedFields {
		if e.Manager != evalsi.FieldManager || e.Operation != string(metav1.ManagedFieldsOperationApply) || e.Subresource != "" {
			continue
		}
		owned := string(e.FieldsV1)
		if uid := ControllerOf(c).UID; uid != "" {
			owned = strings.ReplaceAll(owned, string(uid), ownerPlaceholder)
		}
		c.owned = unique.Make(owned)
	}
	if j.Kind != "Deployment" {
		return c, nil
	}
	c.deployment = &deployment{replicas: j.Spec.Replicas}
	if j.rollout != nil {
		c.deployment.status = *j.rollout
		return c, nil
	}
	if len(j.Status) == 0 {
		return c, nil
	}
	var st deploymentStatusJSON
	if err := json.Unmarshal(j.Status, &st); err != nil {
		return nil, fmt.Errorf("decoding the status of Deployment %s/%s: %w", c.Namespace, c.Name, err)
	}
	c.deployment.status = st.rolloutCounts
	for _, cond := range st.Conditions {
		if cond.Type == replicaFailure && cond.Status == "True" {
			c.deployment.status.PodsRefused = cond.Message
		}
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
