package bench

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPlacement: a replica started by the placement runs on the replicas' CPUs from its first
// instruction (nproc reads its CPUs as it starts), the thread that started it gets its CPUs
// back, and a running process and its threads are moved (what enter does to the control plane).
func TestPlacement(t *testing.T) {
	place := placeProcesses(t)
	if !place.on() {
		t.Skip("fewer than 2 CPUs, or -pin=false")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nproc")
	var out strings.Builder
	cmd.Stdout = &out
	if err := place.start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), strconv.Itoa(place.replicas.Count()); got != want {
		t.Errorf("the started process saw %s CPUs, want the replicas' %s", got, want)
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the starting thread kept CPUs %s, had %s", cpuList(after), cpuList(before))
	}

	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	if !slices.Contains(descendants(os.Getpid()), sleep.Process.Pid) {
		t.Fatalf("process %d, started by this one, is not among its descendants", sleep.Process.Pid)
	}
	moveTree(t, sleep.Process.Pid, place.control)
	var moved unix.CPUSet
	if err := unix.SchedGetaffinity(sleep.Process.Pid, &moved); err != nil {
		t.Fatal(err)
	}
	if moved != place.control {
		t.Errorf("process %d is on CPUs %s, want %s", sleep.Process.Pid, cpuList(moved), cpuList(place.control))
	}
}
