package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// isolatedEnv names the variable by which a test binary knows it runs inside the namespaces
// RunIsolated made; its value is the id of the run's cgroups (nodeCgroupPrefix + id).
const isolatedEnv = "EVALSI_ISOLATED"

// nodeCgroupPrefix starts the name of the cgroup a real node's pods run under, at the top of
// each cgroup hierarchy: the one thing of a run outside its namespaces, removed at its end and,
// after a kill, at the next run's start.
const nodeCgroupPrefix = "evalsi-node-"

// IsolatedMain runs a test binary's tests (m.Run) inside network, mount and PID namespaces of
// their own, for the packages that start a real node (RealNode): RunIsolated, with kubectl built
// for the tests that run it. Without root the tests fail, naming what is missing.
func IsolatedMain(m interface{ Run() int }) {
	os.Exit(RunIsolated(Isolation{Progress: os.Stderr, Kubectl: true}, m.Run))
}

// Isolation configures RunIsolated.
type Isolation struct {
	// Progress receives the builds' progress and what went wrong outside the namespaces.
	Progress io.Writer
	// Kubectl builds kubectl beside the control plane.
	Kubectl bool
	// Files are handed to the process inside as its files 3, 4 and so on (Inherited): a
	// listener opened outside stays on the host's loopback, the one way in from outside.
	Files []*os.File
	// HostDir makes a directory the host sees (HostDir), for what a user reads from outside; it
	// goes when the run ends and, after a kill, at the next run's start.
	HostDir bool
}

// RunIsolated runs inside in network, mount and PID namespaces of its own, where a real node
// (RealNode) can run: every address, route, firewall rule and mount the node makes is in them,
// and every process it starts dies with them when inside returns or this process is killed (the
// kernel ends a PID namespace with its first process). It builds the control plane and the
// node's programs first (nothing inside reaches the Go module proxy), then re-executes this
// program there with the same arguments, which needs root; inside, the same call runs inside and
// returns its code. SIGINT and SIGTERM reach the process inside, which ends as it chooses. Once it
// ends, RunIsolated removes the node's cgroups and returns 1 if anything of it is left.
func RunIsolated(opts Isolation, inside func() int) int {
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	if id := os.Getenv(isolatedEnv); id != "" {
		if err := enterIsolation(); err != nil {
			fmt.Fprintln(progress, "setting up the namespaces:", err)
			return 1
		}
		return inside()
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(progress, "a real node (kubelet, containerd, runc) runs in namespaces of its own, which needs root: run this as root (make test does, as CI does)")
		return 1
	}
	removeNodeCgroups("") // left by a run that was killed
	removeTempDirs("")
	removeHostDirs("")
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	_, err := EnsureAssets(ctx, progress, opts.Kubectl)
	if err == nil {
		_, err = EnsureNodeBinaries(ctx, progress)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(progress, "building the control plane and the real node:", err)
		return 1
	}
	id := strconv.Itoa(os.Getpid())
	// The temporary directory inside: a tmpfs, so that its files go with the namespace.
	tmp := filepath.Join(os.TempDir(), isolatedTempPrefix+id)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		fmt.Fprintln(progress, "making the temporary directory:", err)
		return 1
	}
	env := append(os.Environ(), isolatedEnv+"="+id, "TMPDIR="+tmp)
	if opts.HostDir {
		dir := filepath.Join(os.TempDir(), isolatedHostPrefix+id)
		if err := os.Mkdir(dir, 0o700); err != nil {
			fmt.Fprintln(progress, "making the directory the host sees:", err)
			return 1
		}
		env = append(env, hostDirEnv+"="+dir)
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = opts.Files
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	code := 0
	if err = cmd.Start(); err == nil {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
	wait:
		for {
			select {
			case s := <-signals:
				cmd.Process.Signal(s)
			case err = <-done:
				break wait
			}
		}
	}
	if err != nil {
		code = 1
		var exit *exec.ExitError
		switch {
		case !errors.As(err, &exit):
			fmt.Fprintln(progress, "running in namespaces of its own:", err)
		case exit.ExitCode() > 0:
			code = exit.ExitCode()
		}
	}
	removeTempDirs(id)
	removeHostDirs(id)
	if left := removeNodeCgroups(id); len(left) > 0 {
		fmt.Fprintf(progress, "the real node's cgroups could not be removed: %s\n", strings.Join(left, ", "))
		code = 1
	}
	return code
}

// Inherited is, inside RunIsolated's namespaces, the file Isolation.Files[i] handed in.
func Inherited(i int) *os.File { return os.NewFile(uintptr(3+i), "inherited-"+strconv.Itoa(i)) }

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

// isolatedHostPrefix starts the name of the directory, in the machine's temporary directory, that
// the host sees (Isolation.HostDir); hostDirEnv names it inside.
const (
	isolatedHostPrefix = "evalsi-host-"
	hostDirEnv         = "EVALSI_HOST_DIR"
)

// HostDir is, inside RunIsolated's namespaces, the directory the host sees (Isolation.HostDir),
// or "".
func HostDir() string { return os.Getenv(hostDirEnv) }

// removeHostDirs removes the host's directory of the run id (of every run whose RunIsolated is
// gone, when id is empty).
func removeHostDirs(id string) {
	for _, dir := range leftovers(filepath.Join(os.TempDir(), isolatedHostPrefix), id) {
		os.RemoveAll(dir)
	}
}

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

// Inside reports whether this process runs inside RunIsolated's namespaces.
func Inside() bool {
	_, ok := isolated()
	return ok
}
