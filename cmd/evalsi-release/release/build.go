// Package release builds what a release publishes, the same way in the release workflow and in
// `make release-dry-run`: the operator's binaries for each platform with an SBOM each
// (Binaries), the operator image built FROM a Debian slim base with those binaries copied in
// (the Dockerfile; image.go builds it here without a daemon), and the three charts packaged with
// the release's version and the image's repository and digest, with release notes that name what
// the tests ran on (PackageCharts). Signing is cosign's (sign.go).
package release

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Platforms are the operating system and architectures the binaries and the image are built for.
var Platforms = []string{"linux/amd64", "linux/arm64"}

// Charts are the charts a release packages, by directory under chart/.
var Charts = []string{"evalsi-crds", "evalsi", "evalsi-sandboxd"}

// ImageName is the last element of the operator image's repository: what the release workflow
// pushes (its IMAGE), what the charts' image.repository ends with, and what the dry run pushes.
const ImageName = "evalsi-operator"

// Options describe one release.
type Options struct {
	// Version is the release's version, vMAJOR.MINOR.PATCH[-pre].
	Version string
	// Commit is the revision built.
	Commit string
	// ImageRepository is where the operator image is pushed (ending in ImageName); ImageDigest the
	// digest of the image the release built there (sha256:...). Charts writes both into the
	// charts' image values, and only there: the pool image is another repository's.
	ImageRepository, ImageDigest string
	// ChartRepository is the OCI repository the charts are pushed to.
	ChartRepository string
	// Repo is the repository's root; Out the directory the artifacts are written to.
	Repo, Out string
	// Helm is the helm binary.
	Helm string
	// Tested names what the tests ran on, for the notes.
	Tested Tested
	// Identity is the workflow identity keyless signatures carry, for the notes' verify commands:
	// the repository URL, such as https://example.org/org/repo.
	Identity string
	// Platforms are the binaries' platforms, "os/arch"; Platforms when empty. `make test`
	// rehearses linux/amd64 alone (a cold run would compile every package again for each other
	// architecture); a release and `make release-dry-run` build them all.
	Platforms []string
}

// platforms returns the platforms opts builds for.
func (opts Options) platforms() []string {
	if len(opts.Platforms) == 0 {
		return Platforms
	}
	return opts.Platforms
}

var (
	semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)
	digest = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

// check refuses options a release cannot be built from, before anything is written.
func (opts Options) check() error {
	if !semver.MatchString(opts.Version) {
		return fmt.Errorf("version %q is not vMAJOR.MINOR.PATCH", opts.Version)
	}
	if opts.ImageDigest != "" && !digest.MatchString(opts.ImageDigest) {
		return fmt.Errorf("image digest %q is not sha256:<64 hex digits>", opts.ImageDigest)
	}
	if opts.ImageDigest != "" && filepath.Base(opts.ImageRepository) != ImageName {
		return fmt.Errorf("image repository %q: the operator image's repository ends in /%s", opts.ImageRepository, ImageName)
	}
	for _, p := range opts.Platforms {
		if !slices.Contains(Platforms, p) {
			return fmt.Errorf("platform %q is not one of %s", p, strings.Join(Platforms, ", "))
		}
	}
	return nil
}

// Binaries cross-compiles the operator for each platform into opts.Out, as
// evalsi-operator-<os>-<arch> (the names the Dockerfile copies) with an SPDX SBOM each, and
// returns their paths.
func Binaries(ctx context.Context, opts Options) ([]string, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	var bins []string
	for _, p := range opts.platforms() {
		bin, err := buildBinary(ctx, opts, p)
		if err != nil {
			return nil, err
		}
		if err := writeBinarySBOM(bin, opts.Version); err != nil {
			return nil, err
		}
		bins = append(bins, bin)
	}
	return bins, nil
}

// PackageCharts packages the charts into opts.Out with the release's version and the operator image's
// repository and digest, writes the notes, and returns the packages' paths.
func PackageCharts(ctx context.Context, opts Options) ([]string, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	var pkgs []string
	for _, c := range Charts {
		pkg, err := packageChart(ctx, opts, c)
		if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, pkg)
	}
	notes, err := Notes(opts)
	if err != nil {
		return nil, err
	}
	return pkgs, os.WriteFile(filepath.Join(opts.Out, "RELEASE_NOTES.md"), []byte(notes), 0o644)
}

// buildBinary cross-compiles the operator for platform ("os/arch").
func buildBinary(ctx context.Context, opts Options, platform string) (string, error) {
	goos, goarch, _ := strings.Cut(platform, "/")
	out := filepath.Join(opts.Out, "evalsi-operator-"+goos+"-"+goarch)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+opts.Version+" -X main.commit="+opts.Commit, "-o", out, ".")
	cmd.Dir = opts.Repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building for %s: %v\n%s", platform, err, b)
	}
	return out, nil
}

// packageChart copies a chart, pins its operator image (image.repository and image.digest) when
// the release built one and its alerts' runbooks to the release's tag (pinRunbooks), and packages it with the release's version as both the chart's version
// and its appVersion (the image tag it defaults to).
func packageChart(ctx context.Context, opts Options, name string) (string, error) {
	tmp, err := os.MkdirTemp("", "evalsi-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	src, dst := filepath.Join(opts.Repo, "chart", name), filepath.Join(tmp, name)
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return "", fmt.Errorf("copying chart %s: %w", name, err)
	}
	values := filepath.Join(dst, "values.yaml")
	data, err := os.ReadFile(values)
	if err != nil {
		return "", err
	}
	pinned, err := pinImage(string(data), opts.ImageRepository, opts.ImageDigest)
	if err != nil {
		return "", fmt.Errorf("chart %s: %w", name, err)
	}
	if opts.Identity != "" {
		pinned = pinRunbooks(pinned, RunbooksURL(opts.Identity, opts.Version))
	}
	if err := os.WriteFile(values, []byte(pinned), 0o644); err != nil {
		return "", err
	}
	version := strings.TrimPrefix(opts.Version, "v")
	cmd := exec.CommandContext(ctx, opts.Helm, "package", dst, "--version", version, "--app-version", version, "--destination", opts.Out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("helm package %s: %v\n%s", name, err, b)
	}
	return filepath.Join(opts.Out, name+"-"+version+".tgz"), nil
}
