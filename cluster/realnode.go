package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"evals.si/operator/internal/checkout"
)

// The real node's addresses, inside the network namespace of RunIsolated: the node on a
// veth pair whose both ends are there, its pods on the CNI bridge. Nothing routes out of the
// namespace: the default route points at an address nobody holds.
const (
	realNodeIP  = "10.88.0.2"
	realNodeGW  = "10.88.0.1"
	podSubnet   = "10.244.0.0/24"
	pauseImage  = "evalsi.test/pause:1"
	realNodeDir = "node"
	// nodeRegistry is the node's registry's address.
	nodeRegistry = realNodeIP + ":5000"
	// MetadataAddress is a cloud's instance metadata address, which the real node answers on port
	// 80 from a listener of the test's own: pods must not reach it.
	MetadataAddress = "169.254.169.254"
	// realNodeName is the real node's Node name.
	realNodeName = "real-node"
)

// RealNode is a node whose kubelet runs pods in containers: containerd and runc, with the CNI
// bridge for their network, in the namespaces of RunIsolated.
type RealNode struct {
	Name string
	// IP is the node's address: where a process beside the node serves its pods.
	IP string
	// Registry is the address (host:port) of an OCI registry on the node's network, in memory,
	// which the node pulls from over plain HTTP: where a test pushes images as a user pushes to
	// their cluster's registry.
	Registry string
	dir      string
	bins     NodeBinaries
	procs    []*process
	metadata *http.Server
}

// newRealNode returns the real node of a control plane about to start, with its programs.
func newRealNode(ctx context.Context, progress io.Writer) (*RealNode, error) {
	if _, ok := isolated(); !ok {
		return nil, errors.New("a real node runs only inside namespaces of its own: run it under cluster.RunIsolated (a test binary: cluster.IsolatedMain from its TestMain)")
	}
	bins, err := EnsureNodeBinaries(ctx, progress)
	if err != nil {
		return nil, err
	}
	return &RealNode{Name: realNodeName, IP: realNodeIP, Registry: nodeRegistry, bins: bins}, nil
}

// startRealNode starts the real node's containerd and kubelet with kube-proxy and cluster DNS,
// waits until the node is Ready, starts the NetworkPolicy controller, and waits for cluster DNS. The cluster's processes
// and the node share the test's network namespace; the node's state is under the cluster's
// directory. A test binary runs one: the node's links, address and cgroups are named for the
// namespace, not the node.
func (c *Cluster) startRealNode(ctx context.Context) error {
	n := c.Node
	id, _ := isolated()
	for _, d := range []string{"cni", "pod-logs", "kubelet", "sysctl"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := n.kernelTunables(); err != nil {
		return err
	}
	if err := n.serveMetadata(); err != nil {
		return err
	}
	for _, f := range []struct{ name, text string }{
		{"containerd.toml", n.containerdConfig()},
		{"cni/10-bridge.conflist", n.cniConfig()},
		{"kubelet.yaml", n.kubeletConfig(id, c.pki.CACert)},
		// Pods of dnsPolicy Default (CoreDNS's among them) ask cluster DNS too: nothing outside
		// the namespace answers.
		{"resolv.conf", "nameserver " + clusterDNSIP + "\n"},
	} {
		if err := os.WriteFile(filepath.Join(n.dir, f.name), []byte(f.text), 0o644); err != nil {
			return err
		}
	}
	for _, h := range []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "systemd", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h)); err == nil {
			if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", h, nodeCgroupPrefix+id), 0o755); err != nil {
				return err
			}
		}
	}
	hosts := filepath.Join(n.dir, "certs.d", n.Registry)
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), []byte(fmt.Sprintf("server = 'http://%[1]s'\n[host.'http://%[1]s']\n  capabilities = ['pull', 'resolve']\n", n.Registry)), 0o644); err != nil {
		return err
	}
	registry, err := startProcess(n.dir, "registry", n.bins.Crane, nil, "registry", "serve", "--address", n.Registry)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, registry)
	if err := registry.poll(ctx, 100*time.Millisecond, func(context.Context) error {
		c, err := net.DialTimeout("tcp", n.Registry, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		return err
	}
	path := "PATH=" + filepath.Dir(n.bins.Shim) + ":" + os.Getenv("PATH")
	ctrd, err := startProcess(n.dir, "containerd", n.bins.Containerd, []string{path}, "--config", filepath.Join(n.dir, "containerd.toml"))
	if err != nil {
		return err
	}
	n.procs = append(n.procs, ctrd)
	if err := ctrd.poll(ctx, 100*time.Millisecond, func(context.Context) error {
		_, err := os.Stat(n.socket())
		return err
	}); err != nil {
		return err
	}
	pause, err := c.buildPause(ctx)
	if err != nil {
		return err
	}
	if err := n.Import(ctx, Image{Ref: pauseImage, Files: map[string]string{"/pause": pause}, Entrypoint: []string{"/pause"}, User: "65535"}); err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.dir, "kubelet.kubeconfig")
	if err := writeNodeKubeconfig(c.pki, c.Config.Host, n.Name, kubeconfig); err != nil {
		return err
	}
	kubelet, err := startProcess(n.dir, "kubelet", n.bins.Kubelet, nil,
		"--config", filepath.Join(n.dir, "kubelet.yaml"), "--kubeconfig", kubeconfig,
		"--hostname-override", n.Name, "--node-ip", realNodeIP, "--root-dir", filepath.Join(n.dir, "kubelet"))
	if err != nil {
		return err
	}
	n.procs = append(n.procs, kubelet)
	if err := c.startNodeNetwork(ctx); err != nil {
		return err
	}
	err = kubelet.poll(ctx, 200*time.Millisecond, func(ctx context.Context) error {
		node, err := c.Clientset().CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", n.Name)
	})
	if err != nil {
		return err
	}
	if err := c.startPolicyController(ctx); err != nil {
		return err
	}
	return c.waitClusterDNS(ctx)
}

// Import makes img an image of the node's containerd, as if pulled.
func (n *RealNode) Import(ctx context.Context, img Image) error {
	archive := filepath.Join(n.dir, strings.NewReplacer("/", "_", ":", "_").Replace(img.Ref)+".tar")
	if err := img.writeArchive(archive); err != nil {
		return err
	}
	return n.run(ctx, n.bins.Ctr, "--address", n.socket(), "--namespace", "k8s.io", "images", "import", archive)
}

// stop ends the kubelet and containerd, then every process of the node's pods (their
// containers and shims), so that the cgroups can go.
func (n *RealNode) stop() {
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.procs[i].stop(10 * time.Second)
	}
	n.procs = nil
	if n.metadata != nil {
		n.metadata.Close()
	}
	if id, ok := isolated(); ok {
		killCgroup(filepath.Join("/sys/fs/cgroup", "pids", nodeCgroupPrefix+id))
	}
	killExe(n.bins.Shim)
	unmountUnder(n.dir)
}

// unmountUnder unmounts what is mounted under dir (pods' volumes and root filesystems), the
// latest first, so that the directory can be removed.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		fields := strings.Fields(lines[i])
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			_ = syscall.Unmount(fields[4], syscall.MNT_DETACH)
		}
	}
}

func (n *RealNode) socket() string { return filepath.Join(n.dir, "containerd.sock") }

// network gives the node its address on a veth pair whose both ends are in the test's network
// namespace, and a default route to an address nobody holds, which the kubelet and the CNI
// bridge expect: a packet for an address outside the namespace goes nowhere.
func (n *RealNode) network(clusterDir string) error {
	n.dir = filepath.Join(clusterDir, realNodeDir)
	for _, args := range [][]string{
		{"link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"},
		{"addr", "add", realNodeIP + "/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"link", "set", "eth0-peer", "up"},
		{"route", "add", "default", "via", realNodeGW, "dev", "eth0"},
		{"addr", "add", MetadataAddress + "/32", "dev", "lo"},
	} {
		if err := n.run(context.Background(), "ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// serveMetadata answers HTTP on MetadataAddress:80, as a cloud's instance metadata service would:
// the address pods must not reach, held inside the test's network namespace.
func (n *RealNode) serveMetadata() error {
	l, err := net.Listen("tcp", MetadataAddress+":80")
	if err != nil {
		return fmt.Errorf("serving the metadata address: %w", err)
	}
	n.metadata = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "instance metadata (the test's listener)")
	})}
	go n.metadata.Serve(l)
	return nil
}

// kernelTunables shows the kubelet, in the test's mount namespace, the kernel settings it wants
// (it would set them otherwise, for the whole machine; protectKernelDefaults makes it only check).
func (n *RealNode) kernelTunables() error {
	for key, value := range map[string]string{
		"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10", "kernel/panic_on_oops": "1",
		"kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000",
	} {
		f := filepath.Join(n.dir, "sysctl", strings.ReplaceAll(key, "/", "_"))
		if err := os.WriteFile(f, []byte(value+"\n"), 0o644); err != nil {
			return err
		}
		if err := n.run(context.Background(), "mount", "--bind", f, "/proc/sys/"+key); err != nil {
			return err
		}
	}
	return nil
}

func (n *RealNode) containerdConfig() string {
	return fmt.Sprintf(`version = 3
root = '%[1]s/containerd/root'
state = '%[1]s/containerd/state'
[grpc]
  address = '%[1]s/containerd.sock'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '%[1]s/certs.d'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '%[2]s'
[plugins.'io.containerd.cri.v1.runtime']
  # Root here lacks CAP_SYS_RESOURCE: containers may not lower their OOM score below ours.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '%[3]s'
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['%[4]s']
    conf_dir = '%[1]s/cni'
`, n.dir, pauseImage, n.bins.Runc, n.bins.CNI)
}

func (n *RealNode) cniConfig() string {
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "evalsi", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}}
]}
`, podSubnet, filepath.Join(n.dir, "ipam"))
}

func (n *RealNode) kubeletConfig(id, clientCA string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are v1, which Kubernetes 1.37 supports only when told to.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
containerRuntimeEndpoint: unix://%[2]s/containerd.sock
# The API server's client certificate (kubectl logs, exec) is the harness's admin.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[4]s}
authorization: {mode: AlwaysAllow}
clusterDNS: [%[5]s]
clusterDomain: cluster.local
failSwapOn: false
protectKernelDefaults: true
podLogsDir: %[2]s/pod-logs
resolvConf: %[2]s/resolv.conf
localStorageCapacityIsolation: false
makeIPTablesUtilChains: false
enforceNodeAllocatable: []
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
address: %[3]s
readOnlyPort: 0
healthzPort: 0
`, nodeCgroupPrefix+id, n.dir, realNodeIP, clientCA, clusterDNSIP)
}

// run runs a command of the node's set-up and says what it answered when it fails.
func (n *RealNode) run(ctx context.Context, name string, args ...string) error {
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// buildPause builds the pause program into the cluster's directory.
func (c *Cluster) buildPause(ctx context.Context) (string, error) {
	root, err := checkout.Root()
	if err != nil {
		return "", err
	}
	out := filepath.Join(c.Dir, "pause")
	b := builder{progress: c.opts.Progress}
	return out, b.goCmd(ctx, root, "build", "-o", out, "./cluster/pause")
}

// killCgroup kills every process of the cgroup dir and its descendants, until none is left.
func killCgroup(dir string) {
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		found := false
		filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				found = true
				var pid int
				fmt.Sscan(f, &pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			return nil
		})
		return !found, nil
	})
}

// killExe kills every process running the program at path.
func killExe(path string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == path {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
