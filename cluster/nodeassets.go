package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// NodeBinaries are the programs of a real node (RealNode), built from the Go module proxy into
// the cache on first use.
type NodeBinaries struct {
	// Kubelet and KubeProxy are built in the control plane's module, of the same Kubernetes
	// version.
	Kubelet, KubeProxy string
	// Containerd, its runc shim and ctr, which imports images.
	Containerd, Shim, Ctr string
	// Runc is built with cgo and the seccomp tag, so that it enforces pods' seccomp profiles.
	Runc string
	// CNI is the directory of the CNI plugins: bridge, host-local and loopback.
	CNI string
	// CoreDNS is cluster DNS; KubeRouter enforces NetworkPolicies with Debian's iptables and
	// ipset.
	CoreDNS, KubeRouter string
	// Crane serves the node's registry.
	Crane string
}

// EnsureNodeBinaries returns the real node's programs, building those the cache lacks. runc
// needs Debian's libseccomp-dev, which is installed with apt-get when missing.
func EnsureNodeBinaries(ctx context.Context, progress io.Writer) (NodeBinaries, error) {
	var n NodeBinaries
	containerd := "github.com/containerd/containerd/v2/cmd/"
	dir, err := goInstall(ctx, progress, "containerd", ContainerdVersion, nil,
		containerd+"containerd", containerd+"containerd-shim-runc-v2", containerd+"ctr")
	if err != nil {
		return n, err
	}
	n.Containerd, n.Shim, n.Ctr = filepath.Join(dir, "containerd"), filepath.Join(dir, "containerd-shim-runc-v2"), filepath.Join(dir, "ctr")
	if _, err := os.Stat("/usr/include/seccomp.h"); err != nil {
		if _, err := DebianTool(ctx, progress, "scmp_sys_resolver", "libseccomp-dev", "seccomp"); err != nil {
			return n, fmt.Errorf("runc enforces seccomp profiles with libseccomp: %w", err)
		}
	}
	if dir, err = goInstall(ctx, progress, "runc", RuncVersion, []string{"CGO_ENABLED=1", "GOFLAGS=-mod=mod -trimpath -tags=seccomp"},
		"github.com/opencontainers/runc"); err != nil {
		return n, err
	}
	n.Runc = filepath.Join(dir, "runc")
	plugins := "github.com/containernetworking/plugins/plugins/"
	if n.CNI, err = goInstall(ctx, progress, "bridge", CNIVersion, nil,
		plugins+"main/bridge", plugins+"main/loopback", plugins+"ipam/host-local"); err != nil {
		return n, err
	}
	if dir, err = goInstall(ctx, progress, "coredns", CoreDNSVersion, nil, "github.com/coredns/coredns"); err != nil {
		return n, err
	}
	n.CoreDNS = filepath.Join(dir, "coredns")
	if dir, err = goInstall(ctx, progress, "kube-router", KubeRouterVersion, nil, "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"); err != nil {
		return n, err
	}
	n.KubeRouter = filepath.Join(dir, "kube-router")
	if n.Crane, err = Crane(ctx, progress); err != nil {
		return n, err
	}
	for _, tool := range []struct{ command, pkg string }{{"iptables", "iptables"}, {"ipset", "ipset"}} {
		if _, err := DebianTool(ctx, progress, tool.command, tool.pkg); err != nil {
			return n, err
		}
	}
	// Last: they wait for the control plane's build, whose compiled packages they share.
	b, unlock, err := lockCache(progress)
	if err != nil {
		return n, err
	}
	defer unlock()
	paths, err := b.controlPlane(ctx, "kubelet", "kube-proxy")
	n.Kubelet, n.KubeProxy = paths["kubelet"], paths["kube-proxy"]
	return n, err
}

// goInstall installs the main packages pkgs of one module at version into the cache directory
// name-version (name is the first's binary), once, with env added to the go command's, and
// returns the directory.
func goInstall(ctx context.Context, progress io.Writer, name, version string, env []string, pkgs ...string) (string, error) {
	p, err := cachedTool(progress, name, version, func(dir string) error {
		cache, err := CacheDir()
		if err != nil {
			return err
		}
		args := []string{"install", "-ldflags=-s -w"}
		for _, pkg := range pkgs {
			args = append(args, pkg+"@"+version)
		}
		return builder{cache: cache, progress: progress}.goCmdEnv(ctx, dir, append([]string{"GOBIN=" + dir}, env...), args...)
	})
	return filepath.Dir(p), err
}
