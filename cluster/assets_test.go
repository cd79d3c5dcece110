package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/checkout"
)

// The minor the operator supports is the one the tests' control plane runs.
func TestSupportedMinorIsTheControlPlanes(t *testing.T) {
	if !strings.HasPrefix(KubernetesVersion, "v"+evalsi.KubernetesMinor+".") {
		t.Errorf("the control plane runs Kubernetes %s; the operator supports %s", KubernetesVersion, evalsi.KubernetesMinor)
	}
}

// TestControlPlaneSharesTheOperatorsModules holds the operator's go.mod to the control plane's
// build: every module both build with is at one version, so that a cold machine compiles the
// packages they share once (make dev builds the operator's binary first, then the control plane,
// which finds them compiled). The control plane's module takes the operator's versions; where
// Kubernetes, etcd, KWOK or helm needs a newer one, the operator must require it too.
func TestControlPlaneSharesTheOperatorsModules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cache, err := CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	mod, err := builder{cache: cache}.controlPlaneGoMod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	controlPlane, err := listModules(ctx, dir, "-mod=mod")
	if err != nil {
		t.Fatal(err)
	}
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	// The modules whose packages the operator compiles (go.mod's graph holds more).
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-test", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("listing the operator's packages: %v", err)
	}
	operator := slices.Compact(slices.Sorted(strings.Lines(string(out))))
	versions := map[string]string{}
	for _, m := range controlPlane {
		path, version, _ := strings.Cut(m, " ")
		versions[path] = version
	}
	for _, m := range operator {
		path, version, _ := strings.Cut(strings.TrimSpace(m), " ")
		if cp, ok := versions[path]; ok && cp != version {
			t.Errorf("%s: the operator builds with %s, the control plane with %s: go get %s@%s", path, version, cp, path, cp)
		}
	}
}
