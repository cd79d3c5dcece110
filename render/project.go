package render

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/schemas"
)

// Project returns the evalsid project obj acts in: the project its namespace is bound to (in
// opts.ProjectBindings), else the project named like its namespace. An object whose own
// evals.si/project label names another project is refused with an error naming the label: a
// namespace editor cannot make the operator act in another team's project. With unknown bindings
// (opts.ProjectBindings nil, as offline), the label is taken as given.
func Project(obj *unstructured.Unstructured, opts Options) (string, error) {
	ns := obj.GetNamespace()
	bound := ns
	if p := opts.ProjectBindings[ns]; p != "" {
		bound = p
	}
	label := obj.GetLabels()[evalsi.LabelProject]
	switch {
	case label == "" || label == bound:
		return bound, nil
	case opts.ProjectBindings == nil:
		return label, nil
	}
	return "", schemas.Errors{{
		Pointer: string(pointer("/metadata/labels").at(evalsi.LabelProject)),
		Message: fmt.Sprintf("namespace %s acts in project %s, not %s: a cluster administrator binds a namespace to a project with the label %s on the Namespace",
			ns, bound, label, evalsi.LabelProject),
	}}
}
