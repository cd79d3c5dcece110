package cluster

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/version"
)

// TestOnlyTheSupportedMinorStarts holds the check a started control plane passes: binaries from
// KUBEBUILDER_ASSETS of another minor are refused, naming both minors.
func TestOnlyTheSupportedMinorStarts(t *testing.T) {
	for name, tc := range map[string]struct {
		v    version.Info
		want string
	}{
		"1.37":               {v: version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}},
		"1.37+ (a vendor's)": {v: version.Info{Major: "1", Minor: "37+", GitVersion: "v1.37.2-eks-1"}},
		"1.36":               {v: version.Info{Major: "1", Minor: "36", GitVersion: "v1.36.4"}, want: "Kubernetes 1.36 (v1.36.4); the tests run on 1.37 only"},
		"1.38":               {v: version.Info{Major: "1", Minor: "38", GitVersion: "v1.38.0"}, want: "Kubernetes 1.38"},
	} {
		t.Run(name, func(t *testing.T) {
			err := supportedMinor(&tc.v)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
}
