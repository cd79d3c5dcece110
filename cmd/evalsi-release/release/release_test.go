package release

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"evals.si/operator/cluster"
)

// TestDryRunSignsAndTamperingFails builds a release's binaries and charts as the workflow does,
// signs every artifact with a throwaway key using the pinned cosign, verifies each, and checks
// that a chart package or a binary changed after signing fails verification. (The image part of
// the dry run, which needs buildah and a Debian base, is `make release-dry-run` itself.)
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
	tested, err := WhatTestsRun(ctx, Tested{})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	digest := "sha256:" + strings.Repeat("ab", 32)
	// One platform, as make test's dry run: the other is the same build with another GOARCH.
	opts := Options{Version: "v0.9.1", Commit: "abc1234", ImageRepository: "registry.invalid/evals-si/evalsi-operator", ImageDigest: digest,
		ChartRepository: "registry.invalid/evals-si/charts", Repo: "../../..", Out: out,
		Helm: helm, Tested: tested, Identity: "https://code.invalid/evals-si/evalsi-operator", Platforms: []string{"linux/amd64"}}
	bins, err := Binaries(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := PackageCharts(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The charts run the image the release pushed, and the check says when they do not.
	if err := CheckChartImages(pkgs, opts.ImageRepository, digest); err != nil {
		t.Error(err)
	}
	other := "sha256:" + strings.Repeat("cd", 32)
	if err := CheckChartImages(pkgs, opts.ImageRepository, other); err == nil || !strings.Contains(err.Error(), "not the image this release built") {
		t.Errorf("charts checked against another digest: %v, want a refusal", err)
	}
	if err := CheckChartImages(pkgs, "evalsi/platform", digest); err == nil {
		t.Error("charts checked against another repository pass")
	}
	// The alerts of the charts that have them point at the runbooks of this release's tag.
	runbooks := 0
	for _, p := range pkgs {
		var values struct {
			Prometheus struct{ Alerts struct{ RunbookURL string } }
		}
		if err := ChartValues(p, &values); err != nil {
			t.Fatal(err)
		}
		if got := values.Prometheus.Alerts.RunbookURL; got != "" {
			runbooks++
			if want := "https://code.invalid/evals-si/evalsi-operator/blob/v0.9.1/docs/runbooks.md"; got != want {
				t.Errorf("%s: runbookURL %q, want %q", path.Base(p), got, want)
			}
		}
	}
	if runbooks != 2 {
		t.Errorf("%d charts name runbooks, want evalsi's and evalsi-crds's", runbooks)
	}
	artifacts := append(bins, pkgs...)
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
		regexp.MustCompile(`cosign verify registry\.invalid/evals-si/evalsi-operator@` + regexp.QuoteMeta(digest) + ` \\\n  --certificate-identity https://code.invalid/evals-si/evalsi-operator/\.github/workflows/release\.yml@refs/tags/v0\.9\.1`),
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
		"version without v": {Options{Version: "1.2.3"}, `version "1.2.3" is not vMAJOR.MINOR.PATCH`},
		"short digest":      {Options{Version: "v1.2.3", ImageDigest: "sha256:ab"}, `image digest "sha256:ab" is not`},
		"the pool image's repository": {Options{Version: "v1.2.3", ImageRepository: "registry.invalid/evalsi/platform", ImageDigest: "sha256:" + strings.Repeat("ab", 32)},
			`image repository "registry.invalid/evalsi/platform": the operator image's repository ends in /evalsi-operator`},
		"unknown platform":    {Options{Version: "v1.2.3", Platforms: []string{"linux/s390x"}}, `platform "linux/s390x" is not one of linux/amd64, linux/arm64`},
		"platforms separated": {Options{Version: "v1.2.3", Platforms: []string{"linux/amd64 linux/arm64"}}, `platform "linux/amd64 linux/arm64" is not one of`},
	} {
		t.Run(name, func(t *testing.T) {
			tc.opts.Out = filepath.Join(t.TempDir(), "out")
			_, err := Binaries(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Binaries: %v, want an error containing %q", err, tc.want)
			}
			if _, err := os.Stat(tc.opts.Out); !os.IsNotExist(err) {
				t.Errorf("Binaries made %s before refusing: %v", tc.opts.Out, err)
			}
		})
	}
}

// TestPinImage checks that a release pins the operator image, in every chart, and nothing else:
// the pool image (poolImage) is the platform repository's, and comments stay.
func TestPinImage(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range Charts {
		t.Run(c, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("../../../chart", c, "values.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := pinImage(string(b), "registry.invalid/o/evalsi-operator", d)
			if err != nil {
				t.Fatal(err)
			}
			var values struct {
				Image, PoolImage struct{ Repository, Digest string }
			}
			if err := yaml.Unmarshal([]byte(got), &values); err != nil {
				t.Fatal(err)
			}
			if values.Image.Repository != "registry.invalid/o/evalsi-operator" || values.Image.Digest != d {
				t.Errorf("image %+v, want the release's repository and digest", values.Image)
			}
			if values.PoolImage.Digest != "" || (values.PoolImage.Repository != "" && values.PoolImage.Repository != "evalsi/platform") {
				t.Errorf("poolImage %+v changed; it is the platform repository's", values.PoolImage)
			}
			if strings.Count(got, "\n") != strings.Count(string(b), "\n") || strings.Count(got, "#") != strings.Count(string(b), "#") {
				t.Error("pinning changed lines other than the image's repository and digest")
			}
			unchanged, err := pinImage(string(b), "", "")
			if err != nil || unchanged != string(b) {
				t.Errorf("without a digest the values change: %v", err)
			}
		})
	}
	for name, values := range map[string]string{
		"no image block":          "poolImage:\n  repository: x\n  digest: \"\"\n",
		"an image without digest": "image:\n  repository: x\n  tag: \"\"\npoolImage:\n  digest: \"\"\n",
	} {
		if _, err := pinImage(values, "r/evalsi-operator", d); err == nil {
			t.Errorf("%s: pinned, want an error", name)
		}
	}
}

// TestWorkflowPushesTheChartsImage checks that the release workflow pushes the operator image
// under the name the charts run and the dry run pushes, and that a workflow that names another
// image is caught.
func TestWorkflowPushesTheChartsImage(t *testing.T) {
	name, err := WorkflowImageName("../../../.github/workflows/release.yml")
	if err != nil || name != ImageName {
		t.Errorf("the workflow pushes %q (%v), want %q", name, err, ImageName)
	}
	for _, c := range Charts {
		b, err := os.ReadFile(filepath.Join("../../../chart", c, "values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var values struct{ Image struct{ Repository string } }
		if err := yaml.Unmarshal(b, &values); err != nil {
			t.Fatal(err)
		}
		if path.Base(values.Image.Repository) != ImageName {
			t.Errorf("chart %s runs %s by default, want a repository ending in /%s", c, values.Image.Repository, ImageName)
		}
	}
	wf := filepath.Join(t.TempDir(), "release.yml")
	os.WriteFile(wf, []byte("env:\n  IMAGE: ${{ vars.REGISTRY }}/${{ github.repository_owner }}/platform\n"), 0o644)
	if name, err := WorkflowImageName(wf); err != nil || name != "platform" {
		t.Errorf("a workflow pushing platform reads as %q (%v)", name, err)
	}
}
