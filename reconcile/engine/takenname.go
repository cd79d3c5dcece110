package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/evalsi"
)

// nameRecheck is how often an object whose child's name another object holds looks again: the
// holder is usually not the operator's (no label), so no event says when it is gone.
const nameRecheck = 30 * time.Second

// acceptMetadata asks the API server for an object's metadata only.
const acceptMetadata = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// NameTakenError says that a child the operator would create is named like an object it does
// not control: a team's own Deployment, ServiceAccount or NetworkPolicy, made by hand or by
// another controller. Server-side apply with force would take that object over (its fields
// replaced, this owner's reference added, so that deleting the owner deletes it), which is a
// write its owner's author may have no right to; the operator refuses, and the owner is
// Ready=False Conflict until the name is free.
type NameTakenError struct {
	Kind, Namespace, Name string
	// Holder says what controls the object ("no controller", or a controller's kind and name).
	Holder string
	// Owner is the kind of the object that wanted the name.
	Owner string
}

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("%s %s already exists in namespace %s and is not this %s's (%s); the operator does not take over what it did not make: delete or rename that %s, or rename this %s",
		e.Kind, e.Name, e.Namespace, e.Owner, e.Holder, e.Kind, e.Owner)
}

// claimName makes sure that the missing child want may be created under its name: no object
// holds it, or the one that does is owner's, or it is one the operator made for an object of
// owner's kind and name and nothing else controls it: an earlier object of that name (deleted and
// made again, whose children wait for the garbage collector) or one deleted with its children
// orphaned. Those carry the labels the operator writes (wantsLabels), which only a writer of
// the object could have put there. It reads the API server's watch cache (resourceVersion 0),
// which is enough against an object that existed before, the case that matters, and only the
// name's metadata.
func (e *Engine) claimName(ctx context.Context, gvr schema.GroupVersionResource, want, owner *unstructured.Unstructured) error {
	raw, err := rawResult(e.rest.Get().AbsPath(resourcePath(gvr, want.GetNamespace()), want.GetName()).
		Param("resourceVersion", "0").SetHeader("Accept", acceptMetadata).Do(ctx))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s %s/%s before creating it: %w", want.GetKind(), want.GetNamespace(), want.GetName(), err)
	}
	var held metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &held); err != nil {
		return fmt.Errorf("decoding the metadata of %s %s/%s: %w", want.GetKind(), want.GetNamespace(), want.GetName(), err)
	}
	ref := controllerIn(held.OwnerReferences)
	if ref.UID == owner.GetUID() {
		return nil
	}
	if wantsLabels(held.Labels, want.GetLabels()) && (ref.UID == "" || sameObjectName(ref, owner)) {
		return nil
	}
	holder := "no controller"
	if ref.UID != "" {
		holder = "controlled by " + ref.Kind + " " + ref.Name
	}
	return &NameTakenError{Kind: want.GetKind(), Namespace: want.GetNamespace(), Name: want.GetName(), Holder: holder, Owner: owner.GetKind()}
}

// wantsLabels reports whether held carries the labels that say which object the operator made
// a child for (manager, instance, component) with the values want gives them.
func wantsLabels(held, want map[string]string) bool {
	for _, k := range []string{evalsi.LabelManagedBy, evalsi.LabelInstance, evalsi.LabelComponent} {
		if v, ok := held[k]; !ok || v != want[k] {
			return false
		}
	}
	return true
}

// sameObjectName reports whether ref names an object of owner's group, kind and name: an
// earlier object of that name, since names are unique among the objects that exist.
func sameObjectName(ref controllerRef, owner *unstructured.Unstructured) bool {
	refGroup := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind).Group
	return ref.Kind == owner.GetKind() && ref.Name == owner.GetName() && refGroup == owner.GroupVersionKind().Group
}
