package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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

// built are the three images Push and Images build, by their names in buildah's store.
type built struct{ image, pool, model string }

// build builds the operator image for this machine's platform as the dry run does (the binary,
// then the Dockerfile FROM a Debian base, without a daemon) and, FROM it, the stand-in pool image
// and the stand-in vLLM image, tagged with the version in buildah's store; remove them when done.
func build(ctx context.Context, opts Options, tools Tools, progress io.Writer) (built, func(), error) {
	platform := "linux/" + runtime.GOARCH
	opts.Platforms = []string{platform}
	if _, err := Binaries(ctx, opts); err != nil {
		return built{}, nil, err
	}
	b := tools.Buildah
	base, err := DebianBase(ctx, b, tools.Debootstrap, tools.Cache, debianSuite, runtime.GOARCH, progress)
	if err != nil {
		return built{}, nil, err
	}
	i := built{
		image: "localhost/evalsi/" + ImageName + ":" + opts.Version,
		pool:  "localhost/evalsi/" + PoolStandinName + ":" + opts.Version,
		model: "localhost/evalsi/" + ModelStandinName + ":" + opts.Version,
	}
	remove := func() { b.Remove(context.WithoutCancel(ctx), i.image, i.pool, i.model) }
	if err := b.Build(ctx, filepath.Join(opts.Repo, "Dockerfile"), opts.Out, platform, map[string]string{
		"BASE": base, "TARGETARCH": runtime.GOARCH, "VERSION": opts.Version, "COMMIT": opts.Commit, "SOURCE": opts.Identity,
	}, i.image); err != nil {
		return i, remove, err
	}
	standin := filepath.Join(opts.Repo, "testdata", "pool-standin")
	if err := b.Build(ctx, filepath.Join(standin, "Dockerfile"), standin, platform, map[string]string{"BASE": i.image}, i.pool); err != nil {
		return i, remove, fmt.Errorf("the stand-in pool image FROM the operator image: %w", err)
	}
	return i, remove, buildModelStandin(ctx, opts, b, platform, i.image, i.model)
}

// Push builds the three images (build) and pushes them under registry (host[:port][/path]):
// registry/evalsi-operator, registry/evalsi-pool-standin and registry/evalsi-model-standin,
// tagged with the version. The registry may be plain HTTP or HTTPS with a certificate this
// machine does not trust, as a cluster's own registry often is.
func Push(ctx context.Context, opts Options, tools Tools, registry string, progress io.Writer) (Pushed, error) {
	var p Pushed
	if registry == "" || strings.Contains(registry, "://") {
		return p, fmt.Errorf("registry %q: give host[:port][/path], no scheme", registry)
	}
	i, remove, err := build(ctx, opts, tools, progress)
	if remove != nil {
		defer remove()
	}
	if err != nil {
		return p, err
	}
	b := tools.Buildah
	registry = strings.TrimSuffix(registry, "/")
	p.ImageRepository, p.PoolImageRepository = registry+"/"+ImageName, registry+"/"+PoolStandinName
	p.ModelImageRepository = registry + "/" + ModelStandinName
	if p.ImageDigest, err = b.Push(ctx, i.image, "docker://"+p.ImageRepository+":"+opts.Version); err != nil {
		return p, err
	}
	if p.PoolImageDigest, err = b.Push(ctx, i.pool, "docker://"+p.PoolImageRepository+":"+opts.Version); err != nil {
		return p, err
	}
	if p.ModelImageDigest, err = b.Push(ctx, i.model, "docker://"+p.ModelImageRepository+":"+opts.Version); err != nil {
		return p, err
	}
	fmt.Fprintf(progress, "pushed %s@%s\npushed %s@%s\npushed %s@%s\n", p.ImageRepository, p.ImageDigest,
		p.PoolImageRepository, p.PoolImageDigest, p.ModelImageRepository, p.ModelImageDigest)
	return p, os.WriteFile(filepath.Join(opts.Out, "images.env"), []byte(p.Env()), 0o644)
}

// Images builds the three images (build) and writes each to opts.Out as an image archive
// (<name>.tar, `docker save`'s format, tagged evalsi/<name>:<version>) for a registry this machine
// cannot reach: `docker load`, `podman load`, `ctr images import` or `crane push` take it. It
// returns the archives' paths.
func Images(ctx context.Context, opts Options, tools Tools, progress io.Writer) ([]string, error) {
	i, remove, err := build(ctx, opts, tools, progress)
	if remove != nil {
		defer remove()
	}
	if err != nil {
		return nil, err
	}
	var archives []string
	for name, image := range map[string]string{ImageName: i.image, PoolStandinName: i.pool, ModelStandinName: i.model} {
		path := filepath.Join(opts.Out, name+".tar")
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		if _, err := tools.Buildah.Push(ctx, image, "docker-archive:"+path+":evalsi/"+name+":"+opts.Version); err != nil {
			return nil, err
		}
		archives = append(archives, path)
	}
	slices.Sort(archives)
	for _, a := range archives {
		fmt.Fprintf(progress, "wrote %s\n", a)
	}
	return archives, nil
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
