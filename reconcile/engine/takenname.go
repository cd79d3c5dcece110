package engine

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/reconcile/engine/cached"
)

// nameRecheck is how often an object whose child's name another object holds looks again: the
// holder is usually not the operator's (no label), so no event says when it is gone.
const nameRecheck = 30 * time.Second

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
// the operator did not make holds it (inf's strangers: objects without the operator's label,
// whose metadata inf watches), or the one that does is owner's. What the operator made for an
// earlier object of the name (deleted and made again, its children waiting for the garbage
// collector, or orphaned) carries its label and is taken over, as it should be. The cache may
// lag an object made a moment ago; the case that matters, a team's object made before, it has.
func claimName(inf *informer, want, owner *unstructured.Unstructured) error {
	held := inf.stranger(want.GetNamespace(), want.GetName())
	if held == nil {
		return nil
	}
	ref := cached.ControllerOf(held)
	if ref.UID == owner.GetUID() {
		return nil
	}
	holder := "no controller"
	if ref.UID != "" {
		holder = "controlled by " + ref.Kind + " " + ref.Name
	}
	return &NameTakenError{Kind: want.GetKind(), Namespace: want.GetNamespace(), Name: want.GetName(), Holder: holder, Owner: owner.GetKind()}
}
