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
	"path"
	"path/filepath"
	"slices"
	"strings"

	"evals.si/operator/internal/checkout"
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
	// The real node's runtime: containerd 2.x (Kubernetes 1.37 no longer supports 1.x), runc and
	// the CNI plugins.
	ContainerdVersion = "v2.2.9"
	RuncVersion       = "v1.4.4"
	CNIVersion        = "v1.9.1"
	// The real node's network add-ons: cluster DNS, and kube-router for its NetworkPolicy
	// controller only (iptables and ipset). kube-network-policies (v0.8.0) queues packets with
	// nftables' queue statement, which this kernel lacks; kube-router's advisories are for its
	// BGP routing and service proxy, which are not run.
	CoreDNSVersion    = "v1.14.7"
	KubeRouterVersion = "v2.1.0"
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
// those that are missing from the Go module proxy into the cache directory, with helm (make dev
// and the chart tests render with it) in the same build. Binaries found in an existing
// KUBEBUILDER_ASSETS directory are used as they are. A file lock makes concurrent callers (test
// packages run in parallel) build once. Progress is written to progress: what is built, then a
// line every 30 s.
func EnsureAssets(ctx context.Context, progress io.Writer, withKubectl bool) (Assets, error) {
	names := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "helm"}
	if withKubectl {
		names = append(names, "kubectl")
	}
	b, unlock, err := lockCache(progress)
	if err != nil {
		return Assets{}, err
	}
	defer unlock()
	paths, err := b.controlPlane(ctx, names...)
	if err != nil {
		return Assets{}, err
	}
	dir := filepath.Join(b.cache, "kwok-"+KwokVersion)
	stages := []string{filepath.Join(dir, "stages", "node.yaml"), filepath.Join(dir, "stages", "pod.yaml")}
	if err := b.kwokStages(ctx, stages); err != nil {
		return Assets{}, err
	}
	return Assets{
		Etcd: paths["etcd"], KubeAPIServer: paths["kube-apiserver"], KubeControllerManager: paths["kube-controller-manager"],
		KubeScheduler: paths["kube-scheduler"], Kubectl: paths["kubectl"], Kwok: paths["kwok"], KwokStages: stages,
	}, nil
}

// lockCache takes the cache directory's lock, under which the control plane builds: concurrent
// callers (test packages run in parallel) build once. It returns a builder that reports to
// progress, and the lock's release.
func lockCache(progress io.Writer) (builder, func(), error) {
	cache, err := CacheDir()
	if err != nil {
		return builder{}, nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return builder{}, nil, fmt.Errorf("creating cache directory: %w", err)
	}
	unlock, err := lockFile(filepath.Join(cache, ".lock"))
	if err != nil {
		return builder{}, nil, err
	}
	return builder{cache: cache, progress: progress, kubebuilder: os.Getenv("KUBEBUILDER_ASSETS")}, unlock, nil
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

// controlPlanePackages are the main packages of the binaries the control plane's module builds.
// They are built together as one module, so that the modules they share are resolved to one
// version each (the highest any of them requires, by Go's minimal version selection) and their
// packages compile once: built apart, KWOK (Kubernetes v0.36 libraries), helm (v0.37.0) and etcd
// (its own gRPC) each compiled their own copies of most of what Kubernetes compiles.
var controlPlanePackages = map[string]string{
	"kube-apiserver":          "k8s.io/kubernetes/cmd/kube-apiserver",
	"kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
	"kube-scheduler":          "k8s.io/kubernetes/cmd/kube-scheduler",
	"kubectl":                 "k8s.io/kubernetes/cmd/kubectl",
	"etcd":                    "go.etcd.io/etcd/server/v3",
	"kwok":                    "sigs.k8s.io/kwok/cmd/kwok",
	"helm":                    "helm.sh/helm/v3/cmd/helm",
	"kubelet":                 "k8s.io/kubernetes/cmd/kubelet",
	"kube-proxy":              "k8s.io/kubernetes/cmd/kube-proxy",
}

// controlPlaneDir is the cache directory of the control plane's module and binaries; its name
// holds every version it is built from, so that changing one builds again.
func (b builder) controlPlaneDir() string {
	return filepath.Join(b.cache, fmt.Sprintf("controlplane-kubernetes-%s-etcd-%s-kwok-%s-helm-%s", KubernetesVersion, EtcdVersion, KwokVersion, HelmVersion))
}

// controlPlane builds the binaries names (keys of controlPlanePackages) that are missing, in one go
// build of the control plane's module, and returns the path of each by name. A go build of
// several main packages compiles each package they share once and links them side by side;
// separate builds on a cold machine compile shared packages again or wait on each other.
func (b builder) controlPlane(ctx context.Context, names ...string) (map[string]string, error) {
	dir := b.controlPlaneDir()
	paths := map[string]string{}
	var missing []string
	for _, name := range names {
		if p, ok := b.existing(dir, name); ok {
			paths[name] = p
			continue
		}
		paths[name] = filepath.Join(dir, name)
		missing = append(missing, name)
	}
	if len(missing) == 0 {
		return paths, nil
	}
	src := filepath.Join(dir, "src")
	if err := b.writeControlPlaneModule(ctx, src); err != nil {
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
	slices.Sort(missing)
	fmt.Fprintf(b.progress, "building %s in one go build, first run only\n", strings.Join(missing, ", "))
	for _, name := range missing {
		args = append(args, controlPlanePackages[name])
	}
	if err := b.goCmdLabel(ctx, src, strings.Join(missing, ", "), nil, args...); err != nil {
		return nil, err
	}
	for _, name := range missing {
		if err := os.Rename(filepath.Join(tmp, binaryName(controlPlanePackages[name])), filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// binaryName is the file go build -o DIR/ writes for the main package pkg: its last element, or
// the one before it when that is a major version.
func binaryName(pkg string) string {
	name := path.Base(pkg)
	if isMajorVersion(name) {
		name = path.Base(path.Dir(pkg))
	}
	return name
}

// isMajorVersion reports whether a path element is a module's major version suffix (v2, v3, ...).
func isMajorVersion(elem string) bool {
	return len(elem) > 1 && elem[0] == 'v' && strings.Trim(elem[1:], "0123456789") == ""
}

// writeControlPlaneModule writes the control plane's module into src (controlPlaneGoMod).
func (b builder) writeControlPlaneModule(ctx context.Context, src string) error {
	mod, err := b.controlPlaneGoMod(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("creating build module: %w", err)
	}
	tmp := filepath.Join(src, "go.mod.tmp")
	if err := os.WriteFile(tmp, mod, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(src, "go.mod"))
}

// controlPlaneGoMod is the go.mod of the module the control plane builds in: it requires
// k8s.io/kubernetes, etcd, KWOK and helm, and every module of the operator's own build at the
// operator's version (from the checkout, when run in one), and replaces every staging module
// Kubernetes' go.mod names with the published staging version (the kubernetes module zip omits
// staging/). With the operator's versions in it, the packages both use (client-go, apimachinery,
// the API types) are the same builds, which a cold machine compiles once for both.
func (b builder) controlPlaneGoMod(ctx context.Context) ([]byte, error) {
	info, err := b.download(ctx, b.cache, "k8s.io/kubernetes@"+KubernetesVersion)
	if err != nil {
		return nil, err
	}
	upstream, err := os.ReadFile(info.GoMod)
	if err != nil {
		return nil, fmt.Errorf("reading kubernetes go.mod: %w", err)
	}
	operator, err := operatorModules(ctx)
	if err != nil {
		return nil, err
	}
	var mod bytes.Buffer
	fmt.Fprintf(&mod, "module evalsi.local/controlplane\n\ngo 1.26\n\nrequire (\n")
	fmt.Fprintf(&mod, "\tk8s.io/kubernetes %s\n\tgo.etcd.io/etcd/server/v3 %s\n\tsigs.k8s.io/kwok %s\n\thelm.sh/helm/v3 %s\n",
		KubernetesVersion, EtcdVersion, KwokVersion, HelmVersion)
	for _, m := range operator {
		fmt.Fprintf(&mod, "\t%s\n", m)
	}
	mod.WriteString(")\n\nreplace (\n")
	sc := bufio.NewScanner(bytes.NewReader(upstream))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[1] == "=>" && strings.HasPrefix(f[2], "./staging/") {
			fmt.Fprintf(&mod, "\t%s => %s %s\n", f[0], f[0], StagingVersion)
		}
	}
	mod.WriteString(")\n")
	return mod.Bytes(), nil
}

// operatorModules lists the modules of the operator's build ("path version"), from the checkout
// that holds the working directory; none outside one.
func operatorModules(ctx context.Context) ([]string, error) {
	root, err := checkout.Root()
	if err != nil {
		return nil, nil
	}
	return listModules(ctx, root, "-mod=readonly")
}

// listModules lists the modules in the build of the module in dir ("path version", the version
// a replacement gives where there is one), without it; mod is the go command's -mod flag.
func listModules(ctx context.Context, dir, mod string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{if not .Main}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}", "all")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+mod)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the modules of %s: %w", dir, err)
	}
	var mods []string
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line != "" {
			mods = append(mods, line)
		}
	}
	return mods, nil
}

// kwokStages concatenates the stage files of kustomize/stage/{node,pod}/fast into dst.
// Each is written aside and renamed, the last one last, so that its presence means both are whole.
func (b builder) kwokStages(ctx context.Context, dst []string) error {
	if _, err := os.Stat(dst[len(dst)-1]); err == nil {
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
		tmp := fmt.Sprintf("%s.%d", dst[i], os.Getpid())
		if err := os.WriteFile(tmp, all.Bytes(), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, dst[i]); err != nil {
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
	label := ""
	if args[0] == "build" || args[0] == "install" {
		label = buildLabel(args)
	}
	return b.goCmdLabel(ctx, dir, label, env, args...)
}

// goCmdLabel runs the go command args in dir; when label is set, it says every so often that the
// build of label is still going (progress.go).
func (b builder) goCmdLabel(ctx context.Context, dir, label string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	// -trimpath and no cgo, as go vet, the repository's commands and the release build: the
	// standard library and any module at the same version compile once on a cold machine.
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -trimpath", "CGO_ENABLED=0"), env...)
	done := func(bool) {}
	if label != "" {
		done = b.reportProgress(label)
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
