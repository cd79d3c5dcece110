package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Versions of the control plane that the tests and `make dev` run, and of the tools the tests and
// the release use. Kubernetes 1.37 is the one supported minor.
const (
	KubernetesVersion = "v1.37.2"
	StagingVersion    = "v0.37.2"
	EtcdVersion       = "v3.7.3"
	KwokVersion       = "v0.8.0"
	HelmVersion       = "v3.22.0"
	CosignVersion     = "v3.1.3"
	ActionlintVersion = "v1.7.12"
	CraneVersion      = "v0.22.1"
)

// Assets are the paths of the control-plane binaries and KWOK's stage files.
type Assets struct {
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	// Kubectl is the kubectl of the same Kubernetes version, for tests that drive it as users do.
	Kubectl string
	Kwok    string
	// KwokStages are KWOK configuration files holding the node and pod stages.
	KwokStages []string
}

// CacheDir is where built binaries live, outside any checkout: $EVALSI_CACHE_DIR, else the user's
// cache directory.
func CacheDir() (string, error) {
	if d := os.Getenv("EVALSI_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory: %w", err)
	}
	return filepath.Join(d, "evalsi-operator"), nil
}

// EnsureAssets returns the control-plane binaries, and kubectl when withKubectl is set, building
// those that are missing from the Go module proxy into the cache directory. Binaries found in an existing KUBEBUILDER_ASSETS
// directory are used as they are. A file lock makes concurrent callers (test packages run in
// parallel) build once. Progress is written to progress, one line per binary built.
func EnsureAssets(ctx context.Context, progress io.Writer, withKubectl bool) (Assets, error) {
	cache, err := CacheDir()
	if err != nil {
		return Assets{}, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Assets{}, fmt.Errorf("creating cache directory: %w", err)
	}
	unlock, err := lockFile(filepath.Join(cache, ".lock"))
	if err != nil {
		return Assets{}, err
	}
	defer unlock()

	b := builder{cache: cache, progress: progress, kubebuilder: os.Getenv("KUBEBUILDER_ASSETS")}
	var a Assets
	// Three independent builds side by side: each leaves cores idle while it downloads and links.
	errs := make(chan error, 3)
	go func() {
		names := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}
		if withKubectl {
			names = append(names, "kubectl")
		}
		paths, err := b.kubernetes(ctx, names...)
		if err == nil {
			a.KubeAPIServer, a.KubeControllerManager, a.KubeScheduler = paths[0], paths[1], paths[2]
			if withKubectl {
				a.Kubectl = paths[3]
			}
		}
		errs <- err
	}()
	go func() {
		var err error
		a.Etcd, err = b.etcd(ctx)
		errs <- err
	}()
	go func() {
		var err error
		a.Kwok, a.KwokStages, err = b.kwok(ctx)
		errs <- err
	}()
	var failed []error
	for range 3 {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if err := errors.Join(failed...); err != nil {
		return Assets{}, err
	}
	return a, nil
}

// Helm returns the helm binary, built from the Go module proxy into the cache on first use.
func Helm(ctx context.Context, progress io.Writer) (string, error) {
	return installTool(ctx, progress, "helm", "helm.sh/helm/v3/cmd/helm", HelmVersion)
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

// installTool go-installs pkg@version into the cache directory name-version, once.
func installTool(ctx context.Context, progress io.Writer, name, pkg, version string) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, name+"-"+version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock")) // its own: tools build side by side
	if err != nil {
		return "", err
	}
	defer unlock()
	b := builder{cache: cache, progress: progress}
	if p, ok := b.existing(dir, name); ok {
		return p, nil
	}
	fmt.Fprintf(progress, "building %s %s, first run only\n", name, version)
	if err := b.goCmdEnv(ctx, dir, []string{"GOBIN=" + dir}, "install", "-ldflags=-s -w", pkg+"@"+version); err != nil {
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

type builder struct {
	cache       string
	progress    io.Writer
	kubebuilder string
}

// existing returns the binary name from KUBEBUILDER_ASSETS, or from dir, when it is there.
func (b builder) existing(dir, name string) (string, bool) {
	for _, d := range []string{b.kubebuilder, dir} {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// kubernetes builds the Kubernetes commands names from k8s.io/kubernetes, with the staging
// modules replaced by their published versions (the kubernetes module zip omits staging/), in one
// go build (they share most packages, and their links run side by side), and returns their paths.
func (b builder) kubernetes(ctx context.Context, names ...string) ([]string, error) {
	dir := filepath.Join(b.cache, "kubernetes-"+KubernetesVersion)
	paths := make([]string, len(names))
	var missing []string
	for i, name := range names {
		if p, ok := b.existing(dir, name); ok {
			paths[i] = p
			continue
		}
		paths[i] = filepath.Join(dir, name)
		missing = append(missing, name)
	}
	if len(missing) == 0 {
		return paths, nil
	}
	src := filepath.Join(dir, "src")
	if err := b.writeKubernetesModule(ctx, src); err != nil {
		return nil, err
	}
	minor := strings.Split(strings.TrimPrefix(KubernetesVersion, "v"), ".")[1]
	var ld []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ld = append(ld, "-X", pkg+".gitVersion="+KubernetesVersion, "-X", pkg+".gitMajor=1", "-X", pkg+".gitMinor="+minor)
	}
	tmp := filepath.Join(dir, ".build")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	args := []string{"build", "-mod=mod", "-ldflags", "-s -w " + strings.Join(ld, " "), "-o", tmp + string(filepath.Separator)}
	for _, name := range missing {
		fmt.Fprintf(b.progress, "building %s %s, first run only\n", name, KubernetesVersion)
		args = append(args, "k8s.io/kubernetes/cmd/"+name)
	}
	if err := b.goCmd(ctx, src, args...); err != nil {
		return nil, err
	}
	for _, name := range missing {
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// writeKubernetesModule writes a module that requires k8s.io/kubernetes and replaces every
// staging module its go.mod names with the published staging version.
func (b builder) writeKubernetesModule(ctx context.Context, src string) error {
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err == nil {
		return nil
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("creating build module: %w", err)
	}
	info, err := b.download(ctx, src, "k8s.io/kubernetes@"+KubernetesVersion)
	if err != nil {
		return err
	}
	upstream, err := os.ReadFile(info.GoMod)
	if err != nil {
		return fmt.Errorf("reading kubernetes go.mod: %w", err)
	}
	var mod bytes.Buffer
	fmt.Fprintf(&mod, "module evalsi.local/controlplane\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n", KubernetesVersion)
	sc := bufio.NewScanner(bytes.NewReader(upstream))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[1] == "=>" && strings.HasPrefix(f[2], "./staging/") {
			fmt.Fprintf(&mod, "\t%s => %s %s\n", f[0], f[0], StagingVersion)
		}
	}
	mod.WriteString(")\n")
	return os.WriteFile(filepath.Join(src, "go.mod"), mod.Bytes(), 0o644)
}

// etcd builds the etcd server from go.etcd.io/etcd/server/v3.
func (b builder) etcd(ctx context.Context) (string, error) {
	dir := filepath.Join(b.cache, "etcd-"+EtcdVersion)
	if p, ok := b.existing(dir, "etcd"); ok {
		return p, nil
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("creating build module: %w", err)
	}
	mod := fmt.Sprintf("module evalsi.local/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n", EtcdVersion)
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(mod), 0o644); err != nil {
		return "", err
	}
	fmt.Fprintf(b.progress, "building etcd %s, first run only\n", EtcdVersion)
	out := filepath.Join(dir, "etcd")
	if err := b.goCmd(ctx, src, "build", "-mod=mod", "-ldflags=-s -w", "-o", out+".tmp", "go.etcd.io/etcd/server/v3"); err != nil {
		return "", err
	}
	return out, os.Rename(out+".tmp", out)
}

// kwok installs KWOK and copies its fast node and pod stages out of its module.
func (b builder) kwok(ctx context.Context) (string, []string, error) {
	dir := filepath.Join(b.cache, "kwok-"+KwokVersion)
	stages := []string{filepath.Join(dir, "stages", "node.yaml"), filepath.Join(dir, "stages", "pod.yaml")}
	if err := b.kwokStages(ctx, dir, stages); err != nil {
		return "", nil, err
	}
	if p, ok := b.existing(dir, "kwok"); ok {
		return p, stages, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	fmt.Fprintf(b.progress, "building kwok %s, first run only\n", KwokVersion)
	env := []string{"GOBIN=" + dir}
	if err := b.goCmdEnv(ctx, dir, env, "install", "-ldflags=-s -w", "sigs.k8s.io/kwok/cmd/kwok@"+KwokVersion); err != nil {
		return "", nil, err
	}
	return filepath.Join(dir, "kwok"), stages, nil
}

// kwokStages concatenates the stage files of kustomize/stage/{node,pod}/fast into dst.
func (b builder) kwokStages(ctx context.Context, dir string, dst []string) error {
	if _, err := os.Stat(dst[1]); err == nil {
		return nil
	}
	info, err := b.download(ctx, b.cache, "sigs.k8s.io/kwok@"+KwokVersion)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst[0]), 0o755); err != nil {
		return err
	}
	for i, kind := range []string{"node", "pod"} {
		files, err := filepath.Glob(filepath.Join(info.Dir, "kustomize", "stage", kind, "fast", "*.yaml"))
		if err != nil || len(files) == 0 {
			return fmt.Errorf("no %s stages in the kwok module at %s", kind, info.Dir)
		}
		var all bytes.Buffer
		for _, f := range files {
			if filepath.Base(f) == "kustomization.yaml" {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			all.WriteString("---\n")
			all.Write(data)
			all.WriteString("\n")
		}
		if err := os.WriteFile(dst[i], all.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// moduleInfo is the part of `go mod download -json` that locates a module.
type moduleInfo struct {
	Dir   string
	GoMod string
	Error string
}

// download fetches a module through the Go module proxy and returns where it is.
func (b builder) download(ctx context.Context, dir, module string) (moduleInfo, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var info moduleInfo
	if jerr := json.Unmarshal(out, &info); jerr != nil && err == nil {
		err = jerr
	}
	if info.Error != "" {
		err = errors.New(info.Error)
	}
	if err != nil {
		return moduleInfo{}, fmt.Errorf("downloading %s: %w", module, err)
	}
	return info, nil
}

// DownloadModule fetches a Go module through the module proxy and returns its directory.
func DownloadModule(ctx context.Context, module, version string) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	info, err := builder{cache: cache}.download(ctx, cache, module+"@"+version)
	return info.Dir, err
}

func (b builder) goCmd(ctx context.Context, dir string, args ...string) error {
	return b.goCmdEnv(ctx, dir, nil, args...)
}

func (b builder) goCmdEnv(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	// -trimpath and no cgo, as go vet, the repository's commands and the release build: the
	// standard library and any module at the same version compile once on a cold machine.
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -trimpath", "CGO_ENABLED=0"), env...)
	// A build says every so often that it is still going (progress.go).
	done := func(bool) {}
	if args[0] == "build" || args[0] == "install" {
		done = b.reportProgress(buildLabel(args))
	}
	out, err := cmd.CombinedOutput()
	done(err == nil)
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(out, 30))
	}
	return nil
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
