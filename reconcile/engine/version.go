package engine

import (
	"fmt"

	"k8s.io/apimachinery/pkg/version"

	"evals.si/operator/evalsi"
)

// versionVerdict decides what the engine does on a server of version v: whether the minor is the
// supported one, and whether to reconcile (a server on another minor is refused unless require is
// off). why says so in a sentence for the log and /readyz.
func versionVerdict(v *version.Info, require bool) (supported, reconcile bool, why string) {
	if minor := evalsi.MinorOf(v); minor != evalsi.KubernetesMinor {
		why = fmt.Sprintf("Kubernetes %s (minor %s) is not the supported minor %s", v.GitVersion, minor, evalsi.KubernetesMinor)
		if require {
			return false, false, why + ": not reconciling (--require-supported-minor=false runs anyway, unsupported)"
		}
		return false, true, why + ": reconciling anyway (--require-supported-minor=false)"
	}
	return true, true, ""
}
