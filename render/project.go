package render

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/schemas"
)

// Project returns the evalsid project obj acts in: the project its namespace is bound to (in
// opts.ProjectBindings), else the project named like its namespace while no namespace is bound to
// that project (evalsi.ProjectOf). An object whose own evals.si/project label names another
// project is refused with an error naming the label: a namespace editor cannot make the operator
// act in another team's project. With unknown bindings (opts.ProjectBindings nil, as offline),
// the label is taken as given.
func Project(obj *unstructured.Unstructured, opts Options) (string, error) {
	ns := obj.GetNamespace()
	label := obj.GetLabels()[evalsi.LabelProject]
	if opts.ProjectBindings == nil && label != "" {
		return label, nil
	}
	bound, ok := evalsi.ProjectOf(ns, map[string]string{evalsi.LabelProject: opts.ProjectBindings[ns]}, claimed(opts.ProjectBindings, ns))
	switch {
	case !ok:
		return "", schemas.Errors{{
			Pointer: string(pointer("/metadata/namespace")),
			Message: fmt.Sprintf("namespace %s acts in no project: other namespaces are bound to project %s by the label %s on the Namespace, so one named like the project acts in it only with that label too",
				ns, ns, evalsi.LabelProject),
		}}
	case label == "" || label == bound:
		return bound, nil
	}
	return "", schemas.Errors{{
		Pointer: string(pointer("/metadata/labels").at(evalsi.LabelProject)),
		Message: fmt.Sprintf("namespace %s acts in project %s, not %s: a cluster administrator binds a namespace to a project with the label %s on the Namespace",
			ns, bound, label, evalsi.LabelProject),
	}}
}

// claimed reports whether bindings bind a namespace other than project to project.
func claimed(bindings map[string]string, project string) bool {
	for ns, p := range bindings {
		if p == project && ns != project {
			return true
		}
	}
	return false
}
