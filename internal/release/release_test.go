package release

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"evals.si/operator/cluster"
)

// TestDryRunSignsAndTamperingFails builds a release as `make release-dry-run` does, signs every
// artifact with a throwaway key using the pinned cosign, verifies each, and checks that a chart
// package or a binary changed after signing fails verification.
func TestDryRunSignsAndTamperingFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	helm, err := cluster.Helm(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cosign, err := cluster.Cosign(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	tested, err := WhatTestsRun(ctx, Tested{ImageRepository: "evalsi/platform", ChartRepository: "registry.invalid/evalsi/charts"})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	digest := "sha256:" + strings.Repeat("ab", 32)
	artifacts, err := Build(ctx, Options{Version: "v0.9.1", Commit: "abc1234", ImageDigest: digest, Repo: "../..", Out: out,
		Helm: helm, Tested: tested, Identity: "https://code.invalid/evals-si/evalsi-operator"})
	if err != nil {
		t.Fatal(err)
	}
	if len(artifacts) != len(Platforms)+len(Charts) {
		t.Fatalf("artifacts %v, want %d binaries and %d charts", artifacts, len(Platforms), len(Charts))
	}
	key, err := GenerateKey(ctx, cosign, filepath.Join(out, "throwaway"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range artifacts {
		if err := SignBlob(ctx, cosign, key, a); err != nil {
			t.Fatal(err)
		}
		if err := VerifyBlob(ctx, cosign, key, a); err != nil {
			t.Errorf("%s: %v", filepath.Base(a), err)
		}
	}
	for _, victim := range []string{filepath.Join(out, "evalsi-0.9.1.tgz"), filepath.Join(out, "evalsi-operator-linux-arm64")} {
		f, err := os.OpenFile(victim, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte{0})
		f.Close()
		if err := VerifyBlob(ctx, cosign, key, victim); err == nil {
			t.Errorf("%s verifies after it was changed", filepath.Base(victim))
		}
	}

	notes, err := os.ReadFile(filepath.Join(out, "RELEASE_NOTES.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`Kubernetes v1\.37\.[0-9]+: the control plane every test ran against`),
		regexp.MustCompile(`KEDA ` + regexp.QuoteMeta(cluster.KedaVersion)),
		regexp.MustCompile(regexp.QuoteMeta(digest)),
		regexp.MustCompile(`cosign verify evalsi/platform@` + regexp.QuoteMeta(digest) + ` \\\n  --certificate-identity https://code.invalid/evals-si/evalsi-operator/\.github/workflows/release\.yml@refs/tags/v0\.9\.1`),
	} {
		if !want.Match(notes) {
			t.Errorf("the notes lack %s:\n%s", want, notes)
		}
	}
	for _, sbom := range []string{"evalsi-operator-linux-amd64.spdx.json", "evalsi-operator-linux-arm64.spdx.json"} {
		b, err := os.ReadFile(filepath.Join(out, sbom))
		if err != nil || !strings.Contains(string(b), `"pkg:golang/k8s.io/client-go@`) {
			t.Errorf("SBOM %s does not list client-go: %v", sbom, err)
		}
	}
}
