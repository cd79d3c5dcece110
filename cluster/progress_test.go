package cluster

import "testing"

// TestBuildLabel checks the names the progress lines give the builds the cache makes.
func TestBuildLabel(t *testing.T) {
	for want, args := range map[string][]string{
		"kube-apiserver, kubectl":   {"build", "-mod=mod", "-ldflags", "-s -w -X k8s.io/component-base/version.gitVersion=v1.37.2", "-o", "/c/.build/", "k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kubectl"},
		"cosign":                    {"install", "-ldflags=-s -w", "github.com/sigstore/cosign/v3/cmd/cosign@v3.1.3"},
		"go.etcd.io/etcd/server/v3": {"build", "-mod=mod", "-ldflags=-s -w", "-o", "/c/etcd.tmp", "go.etcd.io/etcd/server/v3"},
		"operator, webhooks":        {"build", "-ldflags=-s -w", "-o", "/c/tmp/", "github.com/kedacore/keda/v2/cmd/operator", "./webhooks"},
	} {
		if got := buildLabel(args); got != want {
			t.Errorf("buildLabel(%q) = %q, want %q", args, got, want)
		}
	}
}
