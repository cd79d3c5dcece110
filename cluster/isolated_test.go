package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/operator/internal/checkout"
)

// TestKilledIsolatedRunLeavesNothing kills a real node's test binary (SIGKILL, as a CI timeout or
// an impatient user does) once its node runs a pod: the kernel ends every process of its
// namespaces with it, and what lies outside them (the node's cgroups, the directory its tmpfs was
// mounted on) is removed by the next run's start, which this test plays.
func TestKilledIsolatedRunLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("a real node needs root: run the tests as root (make test does, as CI does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "realnode.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-trimpath", "-o", bin, "./cluster/realnode")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the real node's tests: %v\n%s", err, out)
	}
	run := exec.CommandContext(ctx, bin, "-test.run", "TestKubeletRunsReadinessProbes")
	run.Dir = filepath.Join(root, "cluster", "realnode")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	id := strconv.Itoa(run.Process.Pid)
	cgroup := filepath.Join("/sys/fs/cgroup", "pids", nodeCgroupPrefix+id)
	eventually(t, ctx, "a pod of the real node running", func() error {
		pods, _ := filepath.Glob(filepath.Join(cgroup, "kubepods", "*", "pod*", "*", "cgroup.procs"))
		if len(cgroupProcesses(pods)) == 0 {
			return os.ErrNotExist
		}
		return nil
	})
	run.Process.Kill()
	run.Wait()
	eventually(t, ctx, "every process of the killed run ended", func() error {
		var procs []string
		filepath.WalkDir(cgroup, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				procs = append(procs, path)
			}
			return nil
		})
		if left := cgroupProcesses(procs); len(left) > 0 {
			return &os.PathError{Op: "left", Path: strings.Join(left, " "), Err: syscall.EBUSY}
		}
		return nil
	})
	// The next run's start.
	removeNodeCgroups("")
	removeTempDirs("")
	if left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", nodeCgroupPrefix+id)); len(left) > 0 {
		t.Errorf("the killed run's cgroups are left: %v", left)
	}
	if _, err := os.Stat(filepath.Join(os.TempDir(), isolatedTempPrefix+id)); !os.IsNotExist(err) {
		t.Errorf("the killed run's temporary directory is left (%v)", err)
	}
}

// cgroupProcesses are the processes listed in the cgroup.procs files files.
func cgroupProcesses(files []string) []string {
	var pids []string
	for _, f := range files {
		data, _ := os.ReadFile(f)
		pids = append(pids, strings.Fields(string(data))...)
	}
	return pids
}
