package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// The repository names of the stand-in images: the pool image's (testdata/pool-standin) and
// vLLM's (testdata/model-standin).
const (
	PoolStandinName  = "evalsi-pool-standin"
	ModelStandinName = "evalsi-model-standin"
)

// Pushed names the images Push pushed, each by repository and digest.
type Pushed struct {
	ImageRepository, ImageDigest           string
	PoolImageRepository, PoolImageDigest   string
	ModelImageRepository, ModelImageDigest string
}

// Env is Pushed as shell assignments, for the install guide's `. images.env`.
func (p Pushed) Env() string {
	return fmt.Sprintf("IMAGE_REPOSITORY=%s\nIMAGE_DIGEST=%s\nPOOL_IMAGE_REPOSITORY=%s\nPOOL_IMAGE_DIGEST=%s\nMODEL_IMAGE_REPOSITORY=%s\nMODEL_IMAGE_DIGEST=%s\n",
		p.ImageRepository, p.ImageDigest, p.PoolImageRepository, p.PoolImageDigest, p.ModelImageRepository, p.ModelImageDigest)
}

// Push builds the operator image for this machine's platform as the dry run does (the binary,
// then the Dockerfile FROM a Debian base, without a daemon) and, FROM it, the stand-in pool image
// and the stand-in vLLM image, and pushes the three under registry (host[:port][/path]):
// registry/evalsi-operator, registry/evalsi-pool-standin and registry/evalsi-model-standin,
// tagged with the version. The registry may be plain HTTP or HTTPS
// with a certificate this machine does not trust, as a cluster's own registry often is.
func Push(ctx context.Context, opts Options, tools Tools, registry string, progress io.Writer) (Pushed, error) {
	var p Pushed
	platform := "linux/" + runtime.GOARCH
	opts.Platforms = []string{platform}
	if registry == "" || strings.Contains(registry, "://") {
		return p, fmt.Errorf("registry %q: give host[:port][/path], no scheme", registry)
	}
	if _, err := Binaries(ctx, opts); err != nil {
		return p, err
	}
	b := tools.Buildah
	base, err := DebianBase(ctx, b, tools.Debootstrap, tools.Cache, debianSuite, runtime.GOARCH, progress)
	if err != nil {
		return p, err
	}
	image := "localhost/evalsi/" + ImageName + ":" + opts.Version
	pool := "localhost/evalsi/" + PoolStandinName + ":" + opts.Version
	model := "localhost/evalsi/" + ModelStandinName + ":" + opts.Version
	defer b.Remove(context.WithoutCancel(ctx), image, pool, model)
	if err := b.Build(ctx, filepath.Join(opts.Repo, "Dockerfile"), opts.Out, platform, map[string]string{
		"BASE": base, "TARGETARCH": runtime.GOARCH, "VERSION": opts.Version, "COMMIT": opts.Commit, "SOURCE": opts.Identity,
	}, image); err != nil {
		return p, err
	}
	standin := filepath.Join(opts.Repo, "testdata", "pool-standin")
	if err := b.Build(ctx, filepath.Join(standin, "Dockerfile"), standin, platform, map[string]string{"BASE": image}, pool); err != nil {
		return p, fmt.Errorf("the stand-in pool image FROM the operator image: %w", err)
	}
	if err := buildModelStandin(ctx, opts, b, platform, image, model); err != nil {
		return p, err
	}
	registry = strings.TrimSuffix(registry, "/")
	p.ImageRepository, p.PoolImageRepository = registry+"/"+ImageName, registry+"/"+PoolStandinName
	p.ModelImageRepository = registry + "/" + ModelStandinName
	if p.ImageDigest, err = b.Push(ctx, image, p.ImageRepository+":"+opts.Version); err != nil {
		return p, err
	}
	if p.PoolImageDigest, err = b.Push(ctx, pool, p.PoolImageRepository+":"+opts.Version); err != nil {
		return p, err
	}
	if p.ModelImageDigest, err = b.Push(ctx, model, p.ModelImageRepository+":"+opts.Version); err != nil {
		return p, err
	}
	fmt.Fprintf(progress, "pushed %s@%s\npushed %s@%s\npushed %s@%s\n", p.ImageRepository, p.ImageDigest,
		p.PoolImageRepository, p.PoolImageDigest, p.ModelImageRepository, p.ModelImageDigest)
	return p, os.WriteFile(filepath.Join(opts.Out, "images.env"), []byte(p.Env()), 0o644)
}

// buildModelStandin builds the stand-in vLLM image FROM base as tag: testdata/model-standin's
// program, compiled here for platform, in a build context of its own.
func buildModelStandin(ctx context.Context, opts Options, b Buildah, platform, base, tag string) error {
	dir, err := os.MkdirTemp("", "evalsi-model-standin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(opts.Repo, "testdata", "model-standin")
	goos, goarch, _ := strings.Cut(platform, "/")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, "vllm-standin"), "./testdata/model-standin")
	cmd.Dir = opts.Repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the stand-in vLLM server: %v\n%s", err, out)
	}
	dockerfile, err := os.ReadFile(filepath.Join(src, "Dockerfile"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), dockerfile, 0o644); err != nil {
		return err
	}
	if err := b.Build(ctx, filepath.Join(dir, "Dockerfile"), dir, platform, map[string]string{"BASE": base}, tag); err != nil {
		return fmt.Errorf("the stand-in vLLM image FROM the operator image: %w", err)
	}
	return nil
}
