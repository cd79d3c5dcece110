package engine

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Tenancy decides where an object may act.
type Tenancy interface {
	// Project returns the project obj acts in, or an error that says why it may act in none
	// (the engine reports it as ProjectNotAllowed and makes no call and no child for it).
	Project(obj *unstructured.Unstructured) (string, error)
	// OnChange calls fn with each namespace whose bindings or labels changed, so that its
	// objects are reconciled again, until the returned function is called.
	OnChange(fn func(namespace string)) (stop func())
}
