package release

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"evals.si/operator/cluster"
	"evals.si/operator/render"
)

// Tested is what a release's tests ran on.
type Tested struct {
	// Kubernetes is the version of the control plane the tests ran (kube-apiserver --version).
	Kubernetes string
	// Keda is the KEDA version the tests ran.
	Keda string
	// VLLMImage is the default image of CheckpointServers, whose arguments golden files check.
	VLLMImage string
}

// WhatTestsRun fills in t what the tests run: the version the tests' kube-apiserver reports (the
// control plane they build), KEDA's version and the default vLLM image.
func WhatTestsRun(ctx context.Context, t Tested) (Tested, error) {
	assets, err := cluster.EnsureAssets(ctx, io.Discard, false)
	if err != nil {
		return t, err
	}
	out, err := exec.CommandContext(ctx, assets.KubeAPIServer, "--version").Output()
	if err != nil {
		return t, fmt.Errorf("asking the tests' kube-apiserver its version: %w", err)
	}
	// It prints "Kubernetes v1.37.2".
	t.Kubernetes = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes"))
	t.Keda = cluster.KedaVersion
	t.VLLMImage = render.DefaultVLLMImage
	return t, nil
}

// OIDCIssuer is the issuer of the release workflow's identity tokens, which keyless signatures
// are bound to.
const OIDCIssuer = "https://token.actions.githubusercontent.com"

// Notes returns the release notes: the version, the image digest, what the tests ran on, the
// artifacts and the commands that verify them.
func Notes(opts Options) (string, error) {
	t := opts.Tested
	if t.Kubernetes == "" || t.Keda == "" || t.VLLMImage == "" {
		return "", fmt.Errorf("release notes need the Kubernetes, KEDA and vLLM versions tested")
	}
	version := strings.TrimPrefix(opts.Version, "v")
	identity := opts.Identity + "/.github/workflows/release.yml@refs/tags/" + opts.Version
	image := opts.ImageRepository + ":" + opts.Version
	digest := "not built by this run: the release workflow builds, signs and pins it"
	if opts.ImageDigest != "" {
		image = opts.ImageRepository + "@" + opts.ImageDigest
		digest = "`" + opts.ImageDigest + "`"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# evalsi-operator %s\n\n", opts.Version)
	fmt.Fprintf(&b, "Revision `%s`. Operator image `%s:%s`, digest %s; for %s. The charts run it by that\n"+
		"digest; pools run the platform image (`poolImage`), which the platform repository builds FROM it.\n\n",
		opts.Commit, opts.ImageRepository, opts.Version, digest, strings.Join(opts.platforms(), " and "))
	b.WriteString("## What the tests ran on\n\n")
	fmt.Fprintf(&b, "- Kubernetes %s: the control plane every test ran against. It is the one supported minor; the\n  charts refuse to install on any other, and the operator refuses to reconcile on one.\n", t.Kubernetes)
	fmt.Fprintf(&b, "- KEDA %s: its operator and admission webhooks, scaling a pool from zero and back.\n", t.Keda)
	fmt.Fprintf(&b, "- vLLM: CheckpointServers default to `%s`; the arguments rendered for it are checked by\n  golden files, not run.\n\n", t.VLLMImage)
	b.WriteString("## Artifacts\n\n")
	for _, c := range Charts {
		fmt.Fprintf(&b, "- Chart `%s-%s.tgz` (`oci://%s/%s`, version %s, appVersion %s)\n", c, version, opts.ChartRepository, c, version, version)
	}
	for _, p := range opts.platforms() {
		bin := "evalsi-operator-" + strings.ReplaceAll(p, "/", "-")
		fmt.Fprintf(&b, "- Binary `%s`, its SBOM `%s.spdx.json` and signature bundle `%s.bundle`\n", bin, bin, bin)
	}
	b.WriteString("\n## Verify what you install\n\n")
	b.WriteString("Every artifact is signed keylessly by the release workflow; verify the signer before you install:\n\n```sh\n")
	fmt.Fprintf(&b, "cosign verify %s \\\n  --certificate-identity %s \\\n  --certificate-oidc-issuer %s\n", image, identity, OIDCIssuer)
	for _, c := range Charts {
		fmt.Fprintf(&b, "cosign verify %s/%s:%s \\\n  --certificate-identity %s \\\n  --certificate-oidc-issuer %s\n", opts.ChartRepository, c, version, identity, OIDCIssuer)
	}
	bin := "evalsi-operator-linux-amd64"
	fmt.Fprintf(&b, "cosign verify-blob %s --bundle %s.bundle \\\n  --certificate-identity %s \\\n  --certificate-oidc-issuer %s\n", bin, filepath.Base(bin), identity, OIDCIssuer)
	b.WriteString("```\n")
	return b.String(), nil
}
