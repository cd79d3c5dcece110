package reconcile

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// classRecheck is how often an object whose SandboxClass is missing or not allowed looks again;
// a change of its namespace's labels reconciles it at once (refreshBindings).
const classRecheck = 30 * time.Second

// sandboxClassRefusal returns the Ready condition of an object in namespace ns that names the
// SandboxClass name when it may not use it: ClassNotFound when the class does not exist,
// ClassNotAllowed when the class's allowedNamespaces does not select the namespace or the class
// cannot be read to check (the check fails closed: a class may be privileged). Nil when it may.
func (e *Engine) sandboxClassRefusal(ctx context.Context, ns, name string) *Condition {
	if name == "" {
		return nil
	}
	class, err := e.client.Resource(evalsi.SandboxClasses).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c := Ready(false, evalsi.ReasonClassNotFound, fmt.Sprintf("SandboxClass %s does not exist", name))
		return &c
	}
	if err != nil {
		c := Ready(false, evalsi.ReasonClassNotAllowed, fmt.Sprintf("cannot read SandboxClass %s to check that namespace %s may use it: %v", name, ns, err))
		return &c
	}
	ok, err := render.NamespaceMayUse(class, e.namespaceLabels(ns))
	if err != nil || !ok {
		c := Ready(false, evalsi.ReasonClassNotAllowed, fmt.Sprintf("namespace %s may not use SandboxClass %s: its spec.allowedNamespaces does not select this namespace; a cluster administrator labels namespaces to allow them", ns, name))
		return &c
	}
	return nil
}

// sandboxClassOf returns the SandboxClass an object's spec names ("" for none).
func sandboxClassOf(obj *unstructured.Unstructured) string {
	name, _, _ := unstructured.NestedString(obj.Object, "spec", "sandboxClass")
	return name
}
