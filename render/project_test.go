package render

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
)

// TestProject holds the rule of where an object acts (evalsi.ProjectOf), as the operator and the
// webhook apply it: the namespace's binding, else the namespace's name while no other namespace is
// bound to that project by label; an object's own label may only repeat it.
func TestProject(t *testing.T) {
	for name, tc := range map[string]struct {
		namespace, label string
		bindings         map[string]string
		want, err        string
	}{
		"unbound, no bindings known": {namespace: "team-a", bindings: map[string]string{}, want: "team-a"},
		"bound by label":             {namespace: "team-a-ci", bindings: map[string]string{"team-a-ci": "team-a"}, want: "team-a"},
		"named like a project another namespace is bound to": {namespace: "team-a", bindings: map[string]string{"team-a-prod": "team-a"},
			err: "/metadata/namespace: namespace team-a acts in no project"},
		"named like a bound project, and bound to it": {namespace: "team-a", bindings: map[string]string{"team-a": "team-a", "team-a-prod": "team-a"}, want: "team-a"},
		"named like a bound project, bound elsewhere": {namespace: "team-a", bindings: map[string]string{"team-a": "team-b", "team-a-prod": "team-a"}, want: "team-b"},
		"an object labelled with another project": {namespace: "team-b", label: "team-a", bindings: map[string]string{},
			err: "/metadata/labels/evals.si~1project: namespace team-b acts in project team-b, not team-a"},
		"an object labelled with its own project": {namespace: "team-a-ci", label: "team-a", bindings: map[string]string{"team-a-ci": "team-a"}, want: "team-a"},
		"offline, the label taken as given":       {namespace: "team-b", label: "team-a", want: "team-a"},
		"offline, no label":                       {namespace: "team-b", want: "team-b"},
	} {
		t.Run(name, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			obj.SetNamespace(tc.namespace)
			if tc.label != "" {
				obj.SetLabels(map[string]string{evalsi.LabelProject: tc.label})
			}
			got, err := Project(obj, Options{Limits: Limits{ProjectBindings: tc.bindings}})
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one saying %q", err, tc.err)
			case tc.err == "" && (err != nil || got != tc.want):
				t.Errorf("%q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
