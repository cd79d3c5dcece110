package engine

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/version"
)

func TestVersionVerdict(t *testing.T) {
	for name, tc := range map[string]struct {
		major, minor   string
		require        bool
		supported, run bool
		why            string
	}{
		"the supported minor":                  {"1", "37", true, true, true, ""},
		"the supported minor with a plus":      {"1", "37+", true, true, true, ""},
		"a newer minor is refused":             {"1", "38", true, false, false, "not the supported minor 1.37: not reconciling"},
		"an older minor is refused":            {"1", "36", true, false, false, "not the supported minor 1.37: not reconciling"},
		"a newer minor, allowed, is warned of": {"1", "38", false, false, true, "reconciling anyway"},
	} {
		t.Run(name, func(t *testing.T) {
			supported, run, why := versionVerdict(&version.Info{Major: tc.major, Minor: tc.minor, GitVersion: "v" + tc.major + "." + tc.minor + ".0"}, tc.require)
			if supported != tc.supported || run != tc.run || !strings.Contains(why, tc.why) {
				t.Errorf("versionVerdict = %v, %v, %q; want %v, %v, containing %q", supported, run, why, tc.supported, tc.run, tc.why)
			}
		})
	}
}
