// Package release builds what a release publishes, the same way in the release workflow and in
// `make release-dry-run`: the operator's binaries for each platform with an SBOM each, the three
// charts packaged with the release's version and image digest, and release notes that name what
// the tests ran on. Signing is cosign's (sign.go).
package release

import (
	"context"
	"fmt"
	"io/fs"
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

// Options describe one release.
type Options struct {
	// Version is the release's version, vMAJOR.MINOR.PATCH[-pre].
	Version string
	// Commit is the revision built.
	Commit string
	// ImageDigest is the digest of the platform image the release built (sha256:...), written into
	// the charts; empty when none was built (a dry run has no container engine).
	ImageDigest string
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

// Build writes the release's binaries, SBOMs, chart packages and notes into opts.Out and returns
// the paths of what is signed: binaries and chart packages.
func Build(ctx context.Context, opts Options) ([]string, error) {
	if !semver.MatchString(opts.Version) {
		return nil, fmt.Errorf("version %q is not vMAJOR.MINOR.PATCH", opts.Version)
	}
	if opts.ImageDigest != "" && !digest.MatchString(opts.ImageDigest) {
		return nil, fmt.Errorf("image digest %q is not sha256:<64 hex digits>", opts.ImageDigest)
	}
	for _, p := range opts.Platforms {
		if !slices.Contains(Platforms, p) {
			return nil, fmt.Errorf("platform %q is not one of %s", p, strings.Join(Platforms, ", "))
		}
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	var signed []string
	for _, p := range opts.platforms() {
		bin, err := buildBinary(ctx, opts, p)
		if err != nil {
			return nil, err
		}
		if err := writeSBOM(bin, opts.Version); err != nil {
			return nil, err
		}
		signed = append(signed, bin)
	}
	for _, c := range Charts {
		pkg, err := packageChart(ctx, opts, c)
		if err != nil {
			return nil, err
		}
		signed = append(signed, pkg)
	}
	notes, err := Notes(opts)
	if err != nil {
		return nil, err
	}
	return signed, os.WriteFile(filepath.Join(opts.Out, "RELEASE_NOTES.md"), []byte(notes), 0o644)
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

// packageChart copies a chart, sets its image digest, and packages it with the release's version
// as both the chart's version and its appVersion (the image tag it defaults to).
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
	const unpinned = "\n  digest: \"\"\n"
	if !strings.Contains(string(data), unpinned) {
		return "", fmt.Errorf("chart %s: values.yaml has no image.digest to set", name)
	}
	if opts.ImageDigest != "" {
		data = []byte(strings.Replace(string(data), unpinned, "\n  digest: \""+opts.ImageDigest+"\"\n", 1))
		if err := os.WriteFile(values, data, fs.FileMode(0o644)); err != nil {
			return "", err
		}
	}
	version := strings.TrimPrefix(opts.Version, "v")
	cmd := exec.CommandContext(ctx, opts.Helm, "package", dst, "--version", version, "--app-version", version, "--destination", opts.Out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("helm package %s: %v\n%s", name, err, b)
	}
	return filepath.Join(opts.Out, name+"-"+version+".tgz"), nil
}
