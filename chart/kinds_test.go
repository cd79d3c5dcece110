package chart_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	vocabulary "evals.si/operator/evalsi"
	"evals.si/operator/internal/golden"
	"evals.si/operator/internal/manifest"
)

// TestChartsListEveryKind holds the charts' lists of the evals.si kinds to the vocabulary's table
// (evalsi.Kinds): evalsi-crds's CRDs (kind, resource, scope), its validating webhook's rules, its
// ClusterRoles of the operator's rights on each namespaced kind and the binder that may bind
// them, and the evalsi chart's RoleBinding of each. A kind added to the table and not to a chart,
// or left in a chart after it left the table, fails here.
func TestChartsListEveryKind(t *testing.T) {
	objects := func(chart, c string, extra ...string) []*unstructured.Unstructured {
		rel := releases[chart]
		args := append([]string{"template", rel[0], chart, "-n", rel[1], "--kube-version", "1.37.0", "--include-crds",
			"--api-versions", "evals.si/v1alpha1", "--api-versions", "evals.si/v1alpha1/SandboxClass", "--api-versions", "keda.sh/v1alpha1"}, extra...)
		docs, err := manifest.Decode(chart, strings.NewReader(helm(t, append(args, valuesArgs(chart, c)...)...)))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]*unstructured.Unstructured, len(docs))
		for i, d := range docs {
			out[i] = d.Object
		}
		return out
	}
	var wantCRDs, wantResources, wantRoles []string
	for _, k := range vocabulary.Kinds {
		scope := "Cluster"
		if k.Namespaced {
			scope = "Namespaced"
			wantRoles = append(wantRoles, "evalsi-operator-"+k.Controller)
		}
		wantCRDs = append(wantCRDs, k.Kind+" "+k.Resource.Resource+"."+k.Resource.Group+" "+k.Resource.Version+" "+scope)
		wantResources = append(wantResources, k.Resource.Resource)
	}
	var crds, webhookResources, roles, binds, bindings []string
	for _, o := range objects("evalsi-crds", "default") {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
			versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
			for _, v := range versions {
				name, _, _ := unstructured.NestedString(v.(map[string]any), "name")
				crds = append(crds, kind+" "+o.GetName()+" "+name+" "+scope)
			}
		case "ValidatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				rules, _, _ := unstructured.NestedSlice(h.(map[string]any), "rules")
				for _, r := range rules {
					groups, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "apiGroups")
					if slices.Contains(groups, vocabulary.Group) {
						resources, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
						webhookResources = append(webhookResources, resources...)
					}
				}
			}
		case "ClusterRole":
			if strings.HasPrefix(o.GetName(), "evalsi-operator-") && o.GetName() != "evalsi-operator-binder" {
				roles = append(roles, o.GetName())
			}
			if o.GetName() == "evalsi-operator-binder" {
				rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
				for _, r := range rules {
					names, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resourceNames")
					binds = append(binds, names...)
				}
			}
		}
	}
	for _, o := range objects("evalsi", "default") {
		if o.GetKind() == "RoleBinding" && o.GetName() != "evalsi-operator" && strings.HasPrefix(o.GetName(), "evalsi-operator-") {
			bindings = append(bindings, o.GetName())
		}
	}
	sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
	for _, c := range []struct {
		what      string
		want, got []string
	}{
		{"evalsi-crds's CRDs", wantCRDs, crds},
		{"the validating webhook's evals.si resources", wantResources, webhookResources},
		{"the operator's ClusterRoles of each namespaced kind", wantRoles, roles},
		{"the ClusterRoles evalsi-operator-binder may bind", wantRoles, binds},
		{"the evalsi chart's RoleBindings of each controller", wantRoles, bindings},
	} {
		if diff := cmp.Diff(sorted(c.want), sorted(c.got)); diff != "" {
			t.Errorf("%s (-evalsi.Kinds +chart):\n%s", c.what, diff)
		}
	}
}

// kindsFile is the generated list of the evals.si kinds each chart ranges over (files/kinds.yaml),
// written from the vocabulary's table.
func kindsFile() []byte {
	var b strings.Builder
	b.WriteString("# The evals.si kinds, written from evalsi.Kinds by `make golden` (chart/TestGoldenKindsFiles):\n")
	b.WriteString("# every template that lists kinds ranges over these. Do not edit.\nkinds:\n")
	for _, k := range vocabulary.Kinds {
		fmt.Fprintf(&b, "  - kind: %s\n    resource: %s\n    controller: %s\n    namespaced: %t\n    workload: %t\n",
			k.Kind, k.Resource.Resource, k.Controller, k.Namespaced, k.Workload)
	}
	return []byte(b.String())
}

// TestGoldenKindsFiles holds each chart's files/kinds.yaml to the vocabulary's table.
func TestGoldenKindsFiles(t *testing.T) {
	for _, chart := range []string{"evalsi-crds", "evalsi"} {
		golden.Check(t, filepath.Join(chart, "files", "kinds.yaml"), kindsFile())
	}
}
