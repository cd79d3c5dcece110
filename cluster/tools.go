package cluster

// The tools the tests and the release use beside the control plane, each built or installed once
// into the cache.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Helm returns the helm binary, built from the Go module proxy into the cache on first use (in the
// control plane's build when that runs).
func Helm(ctx context.Context, progress io.Writer) (string, error) {
	b, unlock, err := lockCache(progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	paths, err := b.controlPlane(ctx, "helm")
	return paths["helm"], err
}

// Cosign returns the cosign binary that signs and verifies releases, built from the Go module
// proxy into the cache on first use.
func Cosign(ctx context.Context, progress io.Writer) (string, error) {
	return installTool(ctx, progress, "cosign", "github.com/sigstore/cosign/v3/cmd/cosign", CosignVersion)
}

// Crane returns crane, whose `registry serve` is the loopback OCI registry the release's dry run
// pushes the image to and signs it in, built into the cache on first use.
func Crane(ctx context.Context, progress io.Writer) (string, error) {
	return installTool(ctx, progress, "crane", "github.com/google/go-containerregistry/cmd/crane", CraneVersion)
}

// DebianTool returns the path of command, which the Debian packages pkgs provide (buildah, and
// debootstrap with Debian's archive keys, for the release's daemonless image build), installing
// them with apt-get when the command is missing: as root, or through sudo when it asks for no
// password.
func DebianTool(ctx context.Context, progress io.Writer, command string, pkgs ...string) (string, error) {
	if p, err := exec.LookPath(command); err == nil {
		return p, nil
	}
	pkg := strings.Join(pkgs, " ")
	install := append([]string{"apt-get", "install", "-y", "-q", "--no-install-recommends"}, pkgs...)
	update := []string{"apt-get", "update", "-q"}
	if os.Geteuid() != 0 {
		install, update = append([]string{"sudo", "-n"}, install...), append([]string{"sudo", "-n"}, update...)
	}
	fmt.Fprintf(progress, "installing the Debian packages %s for %s, first run only\n", pkg, command)
	for _, args := range [][]string{update, install} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s needs the Debian packages %s; %s: %v\n%s", command, pkg, strings.Join(args, " "), err, out)
		}
	}
	return exec.LookPath(command)
}

// Actionlint returns the linter of the release workflow, built into the cache on first use.
func Actionlint(ctx context.Context, progress io.Writer) (string, error) {
	return installTool(ctx, progress, "actionlint", "github.com/rhysd/actionlint/cmd/actionlint", ActionlintVersion)
}

// Promtool returns Prometheus's promtool, which tests the charts' alerting rules (promtool test
// rules), from the Debian package prometheus: downloaded and unpacked into the cache on first use,
// without installing the package (its service is not wanted).
func Promtool(ctx context.Context, progress io.Writer) (string, error) {
	return fromPrometheusPackage(ctx, progress, "promtool")
}

// Prometheus returns the Prometheus server of the same package, which a benchmark runs to draw
// the chart's dashboard from what it scraped (make bench's -dashboard).
func Prometheus(ctx context.Context, progress io.Writer) (string, error) {
	return fromPrometheusPackage(ctx, progress, "prometheus")
}

// fromPrometheusPackage returns the program name of the Debian package prometheus, unpacked into
// the cache on first use.
func fromPrometheusPackage(ctx context.Context, progress io.Writer, name string) (string, error) {
	return cachedTool(progress, name, "debian", func(dir string) error {
		tmp, err := os.MkdirTemp(dir, "download-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		download := exec.CommandContext(ctx, "apt-get", "download", "prometheus")
		download.Dir = tmp
		if out, err := download.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get download prometheus: %v\n%s", err, out)
		}
		debs, err := filepath.Glob(filepath.Join(tmp, "prometheus_*.deb"))
		if err != nil || len(debs) != 1 {
			return fmt.Errorf("apt-get download prometheus left %v", debs)
		}
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], filepath.Join(tmp, "root")).CombinedOutput(); err != nil {
			return fmt.Errorf("unpacking %s: %v\n%s", debs[0], err, out)
		}
		if err := os.Rename(filepath.Join(tmp, "root", "usr", "bin", name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("the package prometheus has no usr/bin/%s: %w", name, err)
		}
		return nil
	})
}

// installTool go-installs pkg@version into the cache directory name-version, once.
func installTool(ctx context.Context, progress io.Writer, name, pkg, version string) (string, error) {
	dir, err := goInstall(ctx, progress, name, version, nil, pkg)
	return filepath.Join(dir, name), err
}

// cachedTool returns the tool name from the cache directory name-version, making it there with install the first time, under a lock of its own so that tools are made
// side by side.
func cachedTool(progress io.Writer, name, version string, install func(dir string) error) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, name+"-"+version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if p, ok := (builder{cache: cache, progress: progress}).existing(dir, name); ok {
		return p, nil
	}
	fmt.Fprintf(progress, "making %s %s, first run only\n", name, version)
	if err := install(dir); err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// lockFile takes an exclusive flock on path and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
