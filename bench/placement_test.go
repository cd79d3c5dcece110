package bench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var pin = flag.Bool("pin", true, "BenchmarkShards: run the replicas on the second half of the CPUs this benchmark may use and everything else (the control plane, evalsid, the benchmark itself) on the first half, as in a cluster whose control plane has nodes of its own; false: all of them share every CPU, and the replicas' CPU is inflated by the API server's and etcd's work on the same cores")

// placement is where BenchmarkShards runs its processes: the control plane, evalsid and the
// benchmark on control, the replicas on replicas. A placement without replicas' CPUs (off)
// leaves every process on every CPU.
type placement struct{ all, control, replicas unix.CPUSet }

// on reports whether the placement moves anything.
func (p placement) on() bool { return p.replicas.Count() > 0 }

// placeProcesses splits the CPUs this process may run on into a first half for the control
// plane and the rest for the replicas (-pin); off with -pin=false or fewer than 2 CPUs.
func placeProcesses(b testing.TB) placement {
	var p placement
	if err := unix.SchedGetaffinity(0, &p.all); err != nil {
		b.Fatalf("reading this process's CPUs: %v", err)
	}
	cpus := cpusOf(p.all)
	if !*pin || len(cpus) < 2 {
		return p
	}
	for i, cpu := range cpus {
		if i < len(cpus)/2 {
			p.control.Set(cpu)
		} else {
			p.replicas.Set(cpu)
		}
	}
	return p
}

// String says where the processes run.
func (p placement) String() string {
	if !p.on() {
		return "every process on every CPU (-pin=false, or one CPU)"
	}
	return fmt.Sprintf("the control plane, evalsid and the benchmark on CPUs %s, the replicas on CPUs %s", cpuList(p.control), cpuList(p.replicas))
}

// enter moves this process and every process it started (the control plane, and whatever is
// started later from its threads: evalsid) onto the control CPUs.
func (p placement) enter(b testing.TB) {
	if p.on() {
		moveTree(b, os.Getpid(), p.control)
	}
}

// leave gives this process and its children every CPU again, for the benchmarks after.
func (p placement) leave(b testing.TB) {
	if p.on() {
		moveTree(b, os.Getpid(), p.all)
	}
}

// start starts a replica on the replicas' CPUs: from a thread of this process locked and moved
// there, whose CPUs the child inherits before its first instruction (so that its Go runtime
// sizes GOMAXPROCS for them).
func (p placement) start(cmd *exec.Cmd) error {
	if !p.on() {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return fmt.Errorf("reading a thread's CPUs: %w", err)
	}
	if err := unix.SchedSetaffinity(0, &p.replicas); err != nil {
		return fmt.Errorf("moving a thread to the replicas' CPUs: %w", err)
	}
	defer unix.SchedSetaffinity(0, &was)
	return cmd.Start()
}

// moveTree sets the CPUs of every thread of pid and of its descendants to cpus, in passes until
// one finds nothing left to move: a thread started meanwhile inherits its creator's CPUs, moved
// already or found by the next pass.
func moveTree(b testing.TB, pid int, cpus unix.CPUSet) {
	for range 20 {
		moved := 0
		for _, p := range append(descendants(pid), pid) {
			tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(p), "task"))
			if err != nil {
				continue // gone
			}
			for _, task := range tasks {
				tid, err := strconv.Atoi(task.Name())
				if err != nil {
					continue
				}
				var now unix.CPUSet
				if unix.SchedGetaffinity(tid, &now) != nil || now == cpus {
					continue // gone, or where it belongs
				}
				if err := unix.SchedSetaffinity(tid, &cpus); err != nil && err != unix.ESRCH {
					b.Fatalf("moving thread %d of process %d to CPUs %s: %v", tid, p, cpuList(cpus), err)
				}
				moved++
			}
		}
		if moved == 0 {
			return
		}
	}
	b.Fatalf("the threads of process %d kept appearing on other CPUs than %s", pid, cpuList(cpus))
}

// descendants returns the processes started by pid, by theirs, and so on, from /proc.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		if parent, err := strconv.Atoi(fields[1]); err == nil {
			children[parent] = append(children[parent], child)
		}
	}
	var out []int
	for next := []int{pid}; len(next) > 0; {
		p := next[0]
		next = append(next[1:], children[p]...)
		out = append(out, children[p]...)
	}
	return out
}

// cpusOf returns the numbers of the CPUs in s, in order.
func cpusOf(s unix.CPUSet) []int {
	var out []int
	for cpu := range len(s) * 64 {
		if s.IsSet(cpu) {
			out = append(out, cpu)
		}
	}
	return out
}

// cpuList writes a CPU set as its CPUs' numbers, comma-separated.
func cpuList(s unix.CPUSet) string {
	var out []string
	for _, cpu := range cpusOf(s) {
		out = append(out, strconv.Itoa(cpu))
	}
	return strings.Join(out, ",")
}
