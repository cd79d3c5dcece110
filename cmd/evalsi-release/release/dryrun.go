package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// Tools are the programs a dry run drives, and the cache it keeps the Debian base in.
type Tools struct {
	Cosign, Crane, Debootstrap string
	Buildah                    Buildah
	Cache                      string
}

// debianSuite is the Debian release of the operator image's base (the Dockerfile's BASE,
// debian:<suite>-slim, in the workflow).
const debianSuite = "trixie"

// pluginDockerfile is what a plugin author writes (docs/image.md): FROM the image, with a tool
// installed by apt-get, running as the image's user again.
const pluginDockerfile = `FROM %s
USER root
RUN apt-get update && apt-get install -y --no-install-recommends jq && rm -rf /var/lib/apt/lists/*
USER 65532:65532
`

// DryRun rehearses a release on this machine and publishes nothing. It builds the binaries;
// builds the operator image from the Dockerfile FROM a Debian base made from Debian's packages,
// for this machine's platform, without a daemon; checks the image's user, entrypoint and labels,
// runs `evalsi-operator version` in it as user 65532, and builds and runs a plugin image FROM it
// with an apt-get install step; pushes the image to a loopback registry under the repository name
// the release workflow pushes to, signs it and attests its SBOM with a throwaway key, verifies
// both, and checks that the tag moved to another image fails verification; packages the charts
// pinned to the pushed digest and fails unless each runs exactly that image; and signs and
// verifies every binary and chart package.
func DryRun(ctx context.Context, opts Options, tools Tools, progress io.Writer) error {
	if err := opts.check(); err != nil {
		return err
	}
	platform := "linux/" + runtime.GOARCH
	if !slices.Contains(opts.platforms(), platform) {
		return fmt.Errorf("the dry run builds the image for this machine's platform, %s, which --platforms leaves out", platform)
	}
	name, err := WorkflowImageName(filepath.Join(opts.Repo, ".github", "workflows", "release.yml"))
	if err != nil {
		return err
	}
	if name != ImageName {
		return fmt.Errorf("the release workflow pushes the operator image as %s, but the charts run %s", name, ImageName)
	}

	bins, err := Binaries(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "built %d binaries with SBOMs\n", len(bins))

	b := tools.Buildah
	base, err := DebianBase(ctx, b, tools.Debootstrap, tools.Cache, debianSuite, runtime.GOARCH, progress)
	if err != nil {
		return err
	}
	tag := "localhost/evalsi/" + ImageName + ":" + opts.Version
	plugin := "localhost/evalsi/plugin-rehearsal:" + opts.Version
	defer b.Remove(context.WithoutCancel(ctx), tag, plugin)
	// The context is the directory of the binaries, as in the workflow.
	if err := b.Build(ctx, filepath.Join(opts.Repo, "Dockerfile"), opts.Out, platform, map[string]string{
		"BASE": base, "TARGETARCH": runtime.GOARCH, "VERSION": opts.Version, "COMMIT": opts.Commit, "SOURCE": opts.Identity,
	}, tag); err != nil {
		return err
	}
	if err := checkImage(ctx, b, tag, opts); err != nil {
		return err
	}
	fmt.Fprintf(progress, "built the operator image FROM %s without a daemon; `evalsi-operator version` runs in it as 65532\n", base)

	dir, err := os.MkdirTemp("", "evalsi-plugin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), fmt.Appendf(nil, pluginDockerfile, tag), 0o644); err != nil {
		return err
	}
	if err := b.Build(ctx, filepath.Join(dir, "Dockerfile"), dir, platform, nil, plugin); err != nil {
		return fmt.Errorf("a plugin image FROM the operator image: %w", err)
	}
	if out, err := b.Run(ctx, plugin, "sh", "-c", "id -u && jq --version && evalsi-operator version"); err != nil {
		return fmt.Errorf("running the plugin image: %w", err)
	} else if !strings.HasPrefix(out, "65532\njq-") || !strings.Contains(out, opts.Version) {
		return fmt.Errorf("the plugin image printed %q: want its user 65532, jq's version and %s", out, opts.Version)
	}
	fmt.Fprintf(progress, "built a plugin image FROM it with apt-get install, and ran it\n")

	dpkg, err := b.Run(ctx, tag, "dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Architecture}\n")
	if err != nil {
		return err
	}
	sbom := filepath.Join(opts.Out, ImageName+"-image.spdx.json")
	bin := filepath.Join(opts.Out, "evalsi-operator-"+strings.ReplaceAll(platform, "/", "-"))
	if err := writeImageSBOM(sbom, opts.Version, dpkg, bin); err != nil {
		return err
	}

	reg, err := StartRegistry(ctx, tools.Crane)
	if err != nil {
		return err
	}
	defer reg.Stop()
	opts.ImageRepository = reg.Addr + "/evalsi/" + name
	if opts.ImageDigest, err = b.Push(ctx, tag, "docker://"+opts.ImageRepository+":"+opts.Version); err != nil {
		return err
	}
	ref := opts.ImageRepository + "@" + opts.ImageDigest
	key, err := GenerateKey(ctx, tools.Cosign, filepath.Join(opts.Out, "throwaway"))
	if err != nil {
		return err
	}
	if err := SignImage(ctx, tools.Cosign, key, ref); err != nil {
		return err
	}
	if err := AttestSBOM(ctx, tools.Cosign, key, ref, sbom); err != nil {
		return err
	}
	if err := VerifyImage(ctx, tools.Cosign, key, ref); err != nil {
		return fmt.Errorf("the image's signature just made does not verify: %w", err)
	}
	if err := VerifySBOM(ctx, tools.Cosign, key, ref); err != nil {
		return fmt.Errorf("the image's SBOM attestation just made does not verify: %w", err)
	}
	// Tampering: the release's tag moved to another image (the plugin) no longer verifies.
	if _, err := b.Push(ctx, plugin, "docker://"+opts.ImageRepository+":"+opts.Version); err != nil {
		return err
	}
	if err := VerifyImage(ctx, tools.Cosign, key, opts.ImageRepository+":"+opts.Version); err == nil {
		return fmt.Errorf("the tag %s verifies after it was moved to another image", opts.Version)
	}
	fmt.Fprintf(progress, "pushed %s, signed it and attested its SBOM; both verify, and the tag moved to another image does not\n", ref)

	pkgs, err := PackageCharts(ctx, opts)
	if err != nil {
		return err
	}
	if err := CheckChartImages(pkgs, opts.ImageRepository, opts.ImageDigest); err != nil {
		return err
	}
	fmt.Fprintf(progress, "packaged %d charts, each running %s\n", len(pkgs), ref)

	for _, a := range append(bins, pkgs...) {
		if err := SignBlob(ctx, tools.Cosign, key, a); err != nil {
			return err
		}
		if err := VerifyBlob(ctx, tools.Cosign, key, a); err != nil {
			return fmt.Errorf("the signature just made does not verify: %w", err)
		}
	}
	fmt.Fprintf(progress, "signed and verified %d binaries and chart packages\n", len(bins)+len(pkgs))
	return nil
}

// checkImage checks what the built image says it is and runs: the user 65532, the binary as its
// entrypoint, the OCI labels of the release; and `evalsi-operator version` in it, as that user,
// printing the release's version.
func checkImage(ctx context.Context, b Buildah, image string, opts Options) error {
	cfg, err := b.Config(ctx, image)
	if err != nil {
		return err
	}
	if cfg.User != "65532:65532" {
		return fmt.Errorf("the image runs as %q, want 65532:65532", cfg.User)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/evalsi-operator"}) {
		return fmt.Errorf("the image's entrypoint is %q, want the binary", cfg.Entrypoint)
	}
	for label, want := range map[string]string{"version": opts.Version, "revision": opts.Commit, "source": opts.Identity} {
		if got := cfg.Labels["org.opencontainers.image."+label]; got != want {
			return fmt.Errorf("the image's label org.opencontainers.image.%s is %q, want %q", label, got, want)
		}
	}
	out, err := b.Run(ctx, image, "sh", "-c", "id -u && /usr/local/bin/evalsi-operator version")
	if err != nil {
		return fmt.Errorf("running the image: %w", err)
	}
	if !strings.HasPrefix(out, "65532\n") || !strings.Contains(out, opts.Version) {
		return fmt.Errorf("the image printed %q: want its user 65532 and then version %s", out, opts.Version)
	}
	return nil
}
