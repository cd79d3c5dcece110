package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/reconcile/engine/cached"
)

// poolOrder is an order like the one package workloads declares for a pool's children.
var poolOrder = &ChildOrder{ApplyFirst: []string{"ServiceAccount", "PodTemplate"}, DeleteFirst: []string{"Role", "RoleBinding"}, DeleteLast: []string{"PodTemplate"}}

// ServiceAccounts go out before the children whose pods run as them; the rest go together.
func TestApplyWaves(t *testing.T) {
	for name, tc := range map[string]struct {
		kinds []string
		want  [][]string
	}{
		"a new autoscaled pool":   {[]string{"ServiceAccount", "Deployment", "ScaledObject", "TriggerAuthentication"}, [][]string{{"ServiceAccount"}, {"Deployment", "ScaledObject", "TriggerAuthentication"}}},
		"only the Deployment":     {[]string{"Deployment"}, [][]string{{"Deployment"}}},
		"only the ServiceAccount": {[]string{"ServiceAccount"}, [][]string{{"ServiceAccount"}}},
		"a checkpoint server":     {[]string{"Deployment", "Service"}, [][]string{{"Deployment", "Service"}}},
		"nothing to apply":        {nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var stale []pendingApply
			for _, k := range tc.kinds {
				stale = append(stale, pendingApply{want: &unstructured.Unstructured{Object: map[string]any{"kind": k}}})
			}
			var got [][]string
			for _, wave := range applyWaves(poolOrder, stale) {
				var kinds []string
				for _, a := range wave {
					kinds = append(kinds, a.want.GetKind())
				}
				got = append(got, kinds)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("waves (-want +got):\n%s", diff)
			}
		})
	}
}

// Children no longer desired go rights first and trial shapes last: when a class leaves the pod
// rung, its launcher's Role and RoleBinding go before the PodTemplate the API server holds the
// launcher's pods to, so there is no moment when the launcher may make pods and its shape is gone.
func TestDeletionOrder(t *testing.T) {
	live := map[string]*cached.Child{}
	for _, kn := range [][2]string{{"PodTemplate", "sandbox-pod-trial"}, {"NetworkPolicy", "sandbox-pod"}, {"RoleBinding", "sandbox-pod-launcher"},
		{"Deployment", "sandbox-pod"}, {"ServiceAccount", "sandbox-pod-trial"}, {"Role", "sandbox-pod-launcher"}} {
		c, err := cached.DecodeChild([]byte(`{"apiVersion":"v1","kind":"` + kn[0] + `","metadata":{"name":"` + kn[1] + `","namespace":"evalsi-sandbox"}}`))
		if err != nil {
			t.Fatal(err)
		}
		live[kn[0]+"/"+kn[1]] = c
	}
	var got []string
	for _, c := range deletionOrder(poolOrder, live) {
		got = append(got, c.Kind())
	}
	want := []string{"Role", "RoleBinding", "Deployment", "NetworkPolicy", "ServiceAccount", "PodTemplate"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deletion order (-want +got):\n%s", diff)
	}
}
