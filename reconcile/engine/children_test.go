package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

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
			for _, wave := range applyWaves(stale) {
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
