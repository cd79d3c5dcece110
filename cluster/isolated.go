package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// isolatedEnv names the variable by which a test binary knows it runs inside the namespaces
// IsolatedMain made; its value is the id of the run's cgroups (nodeCgroupPrefix + id).
const isolatedEnv = "EVALSI_ISOLATED"

// nodeCgroupPrefix starts the name of the cgroup a real node's pods run under, at the top of
// each cgroup hierarchy: the one thing of a run outside its namespaces, removed at its end and,
// after a kill, at the next run's start.
const nodeCgroupPrefix = "evalsi-node-"

// IsolatedMain runs a test binary's tests (m.Run) inside network, mount and PID namespaces of
// their own, for the packages that start a real node (RealNode): every address, route, firewall
// rule and mount the node makes is in them, and every process it starts dies with them when the
// tests end or the test binary is killed (the kernel ends a PID namespace with its first process).
// It re-executes the test binary there, which needs root; without it the tests fail, naming what
// is missing. Outside, once the tests end, it removes the node's cgroups and fails the run if
// anything of it is left.
func IsolatedMain(m interface{ Run() int }) {
	if id := os.Getenv(isolatedEnv); id != "" {
		if err := enterIsolation(); err != nil {
			fmt.Fprintln(os.Stderr, "setting up the test's namespaces:", err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "these tests run a real node (kubelet, containerd, runc) in namespaces of their own: run them as root (make test does, as CI does)")
		os.Exit(1)
	}
	removeNodeCgroups("") // left by a run that was killed
	removeTempDirs("")
	// Inside, nothing reaches the Go module proxy: what the node runs is built first.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	_, err := EnsureAssets(ctx, os.Stderr, true)
	if err == nil {
		_, err = EnsureNodeBinaries(ctx, os.Stderr)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the control plane and the real node:", err)
		os.Exit(1)
	}
	id := strconv.Itoa(os.Getpid())
	// The tests' temporary directory: a tmpfs inside, so that its files go with the namespace.
	tmp := filepath.Join(os.TempDir(), isolatedTempPrefix+id)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "making the tests' temporary directory:", err)
		os.Exit(1)
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), isolatedEnv+"="+id, "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	code := 0
	if err = cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			fmt.Fprintln(os.Stderr, "running the tests in namespaces of their own:", err)
		}
		code = 1
	}
	removeTempDirs(id)
	if left := removeNodeCgroups(id); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "the real node's cgroups could not be removed: %s\n", strings.Join(left, ", "))
		code = 1
	}
	os.Exit(code)
}

// enterIsolation makes the new mount namespace private (nothing mounted in it reaches the host),
// mounts /proc of the new PID namespace, and brings up its loopback.
func enterIsolation() error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	// Containerd's and the CNI plugins' state (network namespaces of pods among it) under /run,
	// and every temporary file of the tests (the control plane's and the node's directories),
	// go with the namespace, also when the tests are killed.
	for _, dir := range []string{"/run", os.TempDir()} {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=1777"); err != nil {
			return fmt.Errorf("mounting %s: %w", dir, err)
		}
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	return nil
}

// isolatedTempPrefix starts the name of the directory, in the machine's temporary directory,
// where a run's tmpfs is mounted inside its namespaces; outside, it stays empty, and it is
// removed at the run's end and, after a kill, at the next run's start.
const isolatedTempPrefix = "evalsi-isolated-"

// removeTempDirs removes the temporary directory of the run id (of every run whose IsolatedMain
// is gone, when id is empty).
func removeTempDirs(id string) {
	for _, dir := range leftovers(filepath.Join(os.TempDir(), isolatedTempPrefix), id) {
		os.RemoveAll(dir)
	}
}

// leftovers are the paths prefix+id, or, when id is empty, prefix+ID for every ID whose
// IsolatedMain is gone (a run still going removes its own at its end).
func leftovers(prefix, id string) []string {
	if id != "" {
		paths, _ := filepath.Glob(prefix + id)
		return paths
	}
	paths, _ := filepath.Glob(prefix + "*")
	var gone []string
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join("/proc", strings.TrimPrefix(p, prefix))); err != nil {
			gone = append(gone, p)
		}
	}
	return gone
}

// isolated reports whether this process runs inside IsolatedMain's namespaces, and the id of its
// node cgroups.
func isolated() (string, bool) {
	id := os.Getenv(isolatedEnv)
	return id, id != ""
}

// removeNodeCgroups removes the node cgroups of the run id (of every run whose IsolatedMain is
// gone, when id is empty), deepest first, and returns those left.
func removeNodeCgroups(id string) []string {
	var roots []string
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		roots = append(roots, leftovers(filepath.Join(h, nodeCgroupPrefix), id)...)
	}
	var left []string
	for _, root := range roots {
		var dirs []string
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) && id != "" {
				left = append(left, dirs[i])
			}
		}
	}
	return left
}
