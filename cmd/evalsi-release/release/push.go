package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// PoolStandinName is the repository name of the stand-in pool image (testdata/pool-standin).
const PoolStandinName = "evalsi-pool-standin"

// Pushed names the images Push pushed, each by repository and digest.
type Pushed struct {
	ImageRepository, ImageDigest         string
	PoolImageRepository, PoolImageDigest string
}

// Env is Pushed as shell assignments, for the install guide's `. images.env`.
func (p Pushed) Env() string {
	return fmt.Sprintf("IMAGE_REPOSITORY=%s\nIMAGE_DIGEST=%s\nPOOL_IMAGE_REPOSITORY=%s\nPOOL_IMAGE_DIGEST=%s\n",
		p.ImageRepository, p.ImageDigest, p.PoolImageRepository, p.PoolImageDigest)
}

// Push builds the operator image for this machine's platform as the dry run does (the binary,
// then the Dockerfile FROM a Debian base, without a daemon) and the stand-in pool image FROM it,
// and pushes both under registry (host[:port][/path]): registry/evalsi-operator and
// registry/evalsi-pool-standin, tagged with the version. The registry may be plain HTTP or HTTPS
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
	defer b.Remove(context.WithoutCancel(ctx), image, pool)
	if err := b.Build(ctx, filepath.Join(opts.Repo, "Dockerfile"), opts.Out, platform, map[string]string{
		"BASE": base, "TARGETARCH": runtime.GOARCH, "VERSION": opts.Version, "COMMIT": opts.Commit, "SOURCE": opts.Identity,
	}, image); err != nil {
		return p, err
	}
	standin := filepath.Join(opts.Repo, "testdata", "pool-standin")
	if err := b.Build(ctx, filepath.Join(standin, "Dockerfile"), standin, platform, map[string]string{"BASE": image}, pool); err != nil {
		return p, fmt.Errorf("the stand-in pool image FROM the operator image: %w", err)
	}
	registry = strings.TrimSuffix(registry, "/")
	p.ImageRepository, p.PoolImageRepository = registry+"/"+ImageName, registry+"/"+PoolStandinName
	if p.ImageDigest, err = b.Push(ctx, image, p.ImageRepository+":"+opts.Version); err != nil {
		return p, err
	}
	if p.PoolImageDigest, err = b.Push(ctx, pool, p.PoolImageRepository+":"+opts.Version); err != nil {
		return p, err
	}
	fmt.Fprintf(progress, "pushed %s@%s\npushed %s@%s\n", p.ImageRepository, p.ImageDigest, p.PoolImageRepository, p.PoolImageDigest)
	return p, os.WriteFile(filepath.Join(opts.Out, "images.env"), []byte(p.Env()), 0o644)
}
