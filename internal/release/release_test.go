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
	// One platform, as make test's dry run: the other is the same build with another GOARCH.
	artifacts, err := Build(ctx, Options{Version: "v0.9.1", Commit: "abc1234", ImageDigest: digest, Repo: "../..", Out: out,
		Helm: helm, Tested: tested, Identity: "https://code.invalid/evals-si/evalsi-operator", Platforms: []string{"linux/amd64"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(artifacts) != 1+len(Charts) {
		t.Fatalf("artifacts %v, want 1 binary and %d charts", artifacts, len(Charts))
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
	for _, victim := range []string{filepath.Join(out, "evalsi-0.9.1.tgz"), filepath.Join(out, "evalsi-operator-linux-amd64")} {
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
	for _, sbom := range []string{"evalsi-operator-linux-amd64.spdx.json"} {
		b, err := os.ReadFile(filepath.Join(out, sbom))
		if err != nil || !strings.Contains(string(b), `"pkg:golang/k8s.io/client-go@`) {
			t.Errorf("SBOM %s does not list client-go: %v", sbom, err)
		}
	}
}

// TestBuildRefusesBadOptions checks the options a release refuses before it builds anything.
func TestBuildRefusesBadOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		opts Options
		want string
	}{
		"version without v":   {Options{Version: "1.2.3"}, `version "1.2.3" is not vMAJOR.MINOR.PATCH`},
		"short digest":        {Options{Version: "v1.2.3", ImageDigest: "sha256:ab"}, `image digest "sha256:ab" is not`},
		"unknown platform":    {Options{Version: "v1.2.3", Platforms: []string{"linux/s390x"}}, `platform "linux/s390x" is not one of linux/amd64, linux/arm64`},
		"platforms separated": {Options{Version: "v1.2.3", Platforms: []string{"linux/amd64 linux/arm64"}}, `platform "linux/amd64 linux/arm64" is not one of`},
	} {
		t.Run(name, func(t *testing.T) {
			tc.opts.Out = filepath.Join(t.TempDir(), "out")
			_, err := Build(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build: %v, want an error containing %q", err, tc.want)
			}
			if _, err := os.Stat(tc.opts.Out); !os.IsNotExist(err) {
				t.Errorf("Build made %s before refusing: %v", tc.opts.Out, err)
			}
		})
	}
}
