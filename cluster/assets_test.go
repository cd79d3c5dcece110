package cluster

import (
	"strings"
	"testing"

	"evals.si/operator/evalsi"
)

// The minor the operator supports is the one the tests' control plane runs.
func TestSupportedMinorIsTheControlPlanes(t *testing.T) {
	if !strings.HasPrefix(KubernetesVersion, "v"+evalsi.KubernetesMinor+".") {
		t.Errorf("the control plane runs Kubernetes %s; the operator supports %s", KubernetesVersion, evalsi.KubernetesMinor)
	}
}
