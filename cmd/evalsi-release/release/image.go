package release

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Buildah builds and runs images without a daemon: buildah with storage of its own (vfs, which
// needs no kernel overlay support) and chroot isolation (no OCI runtime), so a build touches
// neither the system's image store nor a container engine.
type Buildah struct {
	// Bin is the buildah binary; Root its image store; RunRoot its state while it runs.
	Bin, Root, RunRoot string
}

// run runs buildah with args and returns its standard output.
func (b Buildah) run(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--root", b.Root, "--runroot", b.RunRoot, "--storage-driver", "vfs"}, args...)
	cmd := exec.CommandContext(ctx, b.Bin, args...)
	cmd.Env = append(os.Environ(), "BUILDAH_ISOLATION=chroot")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("buildah %s: %v\n%s%s", strings.Join(args[6:], " "), err, out, stderr.String())
	}
	return string(out), nil
}

// Build builds the Dockerfile dockerfile with the context directory dir for platform
// ("linux/amd64"), with build arguments args, and tags the image tag. Base images are local: it
// never pulls.
func (b Buildah) Build(ctx context.Context, dockerfile, dir, platform string, args map[string]string, tag string) error {
	cmd := []string{"build", "--pull=never", "--isolation", "chroot", "--platform", platform, "-f", dockerfile, "-t", tag}
	for k, v := range args {
		cmd = append(cmd, "--build-arg", k+"="+v)
	}
	_, err := b.run(ctx, append(cmd, dir)...)
	return err
}

// Run runs argv in a new container of image, as the image's user, and returns its output.
func (b Buildah) Run(ctx context.Context, image string, argv ...string) (string, error) {
	out, err := b.run(ctx, "from", "--pull=never", "-q", image)
	if err != nil {
		return "", err
	}
	ctr := strings.TrimSpace(out)
	defer b.run(context.WithoutCancel(ctx), "rm", ctr)
	return b.run(ctx, append([]string{"run", ctr, "--"}, argv...)...)
}

// ImageConfig is what an image's configuration says it runs and is.
type ImageConfig struct {
	User       string
	Entrypoint []string
	Labels     map[string]string
}

// Config reads the configuration of image.
func (b Buildah) Config(ctx context.Context, image string) (ImageConfig, error) {
	out, err := b.run(ctx, "inspect", "--type", "image", image)
	if err != nil {
		return ImageConfig{}, err
	}
	var doc struct {
		OCIv1 struct{ Config ImageConfig }
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return ImageConfig{}, fmt.Errorf("reading the configuration of %s: %w", image, err)
	}
	return doc.OCIv1.Config, nil
}

// Push pushes image to dest, a containers transport reference: docker://host/repository:tag
// (plain HTTP, as a loopback registry serves) or docker-archive:path:tag, and returns the digest
// of the manifest pushed.
func (b Buildah) Push(ctx context.Context, image, dest string) (string, error) {
	f, err := os.CreateTemp("", "evalsi-digest-")
	if err != nil {
		return "", err
	}
	f.Close()
	defer os.Remove(f.Name())
	if _, err := b.run(ctx, "push", "--tls-verify=false", "--digestfile", f.Name(), image, dest); err != nil {
		return "", err
	}
	d, err := os.ReadFile(f.Name())
	if err != nil {
		return "", err
	}
	if !digest.Match(d) {
		return "", fmt.Errorf("pushing %s: the digest %q is not sha256:<64 hex digits>", image, d)
	}
	return string(d), nil
}

// Remove deletes images from the store; the cached base stays.
func (b Buildah) Remove(ctx context.Context, images ...string) error {
	_, err := b.run(ctx, append([]string{"rmi", "-f"}, images...)...)
	return err
}

// debianMirror is where debootstrap fetches Debian's packages.
const debianMirror = "http://deb.debian.org/debian"

// DebianBase returns the local name of a slim Debian base image of suite for arch (Debian's
// names: amd64, arm64), made from Debian's own packages: debootstrap's minbase with CA
// certificates, then the documentation, manuals, package lists and downloaded packages removed,
// and dpkg told to leave documentation out of later installs, as Debian's slim images are. The
// root file system is kept as a tar in cacheDir, made once; importing it takes seconds.
func DebianBase(ctx context.Context, b Buildah, debootstrap, cacheDir, suite, arch string, progress io.Writer) (string, error) {
	name := "localhost/evalsi/debian-base:" + suite + "-" + arch
	if _, err := b.run(ctx, "inspect", "--type", "image", name); err == nil {
		return name, nil
	}
	tarball := filepath.Join(cacheDir, "debian-"+suite+"-"+arch+".tar")
	if _, err := os.Stat(tarball); err != nil {
		fmt.Fprintf(progress, "making a Debian %s base from Debian's packages (debootstrap), first run only\n", suite)
		if err := debootstrapTar(ctx, debootstrap, cacheDir, suite, arch, tarball); err != nil {
			return "", err
		}
	}
	out, err := b.run(ctx, "from", "-q", "scratch")
	if err != nil {
		return "", err
	}
	ctr := strings.TrimSpace(out)
	defer b.run(context.WithoutCancel(ctx), "rm", ctr)
	if _, err := b.run(ctx, "add", ctr, tarball, "/"); err != nil {
		return "", err
	}
	if _, err := b.run(ctx, "config", "--arch", arch, "--os", "linux", "--cmd", "/bin/bash",
		"--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", ctr); err != nil {
		return "", err
	}
	if _, err := b.run(ctx, "commit", "-q", ctr, name); err != nil {
		return "", err
	}
	return name, nil
}

// slimExcludes is dpkg's configuration in the slim base: later installs (a plugin image's RUN
// apt-get install) leave documentation out too.
const slimExcludes = `path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
`

// debootstrapTar makes the root file system of the base in a directory under cacheDir, slims
// it, and writes it as the tar file out (numeric owners, empty /dev, /proc and /sys).
func debootstrapTar(ctx context.Context, debootstrap, cacheDir, suite, arch, out string) error {
	root, err := os.MkdirTemp(cacheDir, "debootstrap-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	cmd := exec.CommandContext(ctx, debootstrap, "--variant=minbase", "--include=ca-certificates", "--arch="+arch,
		"--keyring=/usr/share/keyrings/debian-archive-keyring.gpg", suite, root, debianMirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("debootstrap %s: %v\n%s", suite, err, out)
	}
	for _, pattern := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "usr/share/doc/*/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*", "dev/*", "proc/*", "sys/*", "tmp/*", "var/log/*"} {
		matches, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, m := range matches {
			if filepath.Base(m) == "copyright" {
				continue
			}
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/dpkg/dpkg.cfg.d/slim"), []byte(slimExcludes), 0o644); err != nil {
		return err
	}
	tmp := out + ".part"
	if b, err := exec.CommandContext(ctx, "tar", "-C", root, "--numeric-owner", "-cf", tmp, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("archiving the base: %v\n%s", err, b)
	}
	return os.Rename(tmp, out)
}
