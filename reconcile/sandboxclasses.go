package reconcile

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
)

// classRecheck is how often an object whose SandboxClass is missing or not allowed looks again;
// a change of its namespace's labels reconciles it at once (refreshBindings).
const classRecheck = 30 * time.Second

// sandboxClassRefusal returns the Ready condition of an object in namespace ns that names the
// SandboxClass name when it may not use it (classRefusal), or nil.
func (e *Engine) sandboxClassRefusal(ctx context.Context, ns, name string) *Condition {
	if name == "" {
		return nil
	}
	class, err := e.client.Resource(evalsi.SandboxClasses).Get(ctx, name, metav1.GetOptions{})
	return classRefusal(ns, name, class, err, e.namespaceLabels(ns))
}

// sandboxClassOf returns the SandboxClass an object's spec names ("" for none).
func sandboxClassOf(obj *unstructured.Unstructured) string {
	name, _, _ := unstructured.NestedString(obj.Object, "spec", "sandboxClass")
	return name
}
