// Package maketest runs a make target of the checkout as a user types it in a shell, for the
// tests of the commands README and docs/install.md give: in a process group of its own (a
// shell's foreground job), its output read line by line, Ctrl-C as SIGINT to the group.
package maketest

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"evals.si/operator/internal/checkout"
)

// Run is one make command started by a test.
type Run struct {
	t      *testing.T
	cmd    *exec.Cmd
	exited chan error

	mu    sync.Mutex
	lines []string
}

// Start runs `make ARGS` in the checkout's root, handing each line it prints (stdout and stderr)
// to watch as it comes, and kills what is left of it when the test ends.
func Start(t *testing.T, watch func(line string), args ...string) *Run {
	t.Helper()
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", root}, args...)...)
	// The test may itself run under make (make test): its jobserver is not this make's.
	cmd.Env = withoutMake(os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &Run{t: t, cmd: cmd, exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
			if watch != nil {
				watch(sc.Text())
			}
		}
		r.exited <- cmd.Wait()
	}()
	// A test that fails first leaves make running: Ctrl-C, so that the program removes what it
	// made, then, should it hang, SIGKILL.
	t.Cleanup(func() {
		select {
		case err := <-r.exited:
			r.exited <- err
			return
		default:
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-r.exited:
		case <-time.After(3 * time.Minute):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	return r
}

// Until waits until done is closed, failing the test if make exits first or ctx ends.
func (r *Run) Until(ctx context.Context, what string, done <-chan struct{}) {
	r.t.Helper()
	select {
	case <-done:
	case err := <-r.exited:
		r.exited <- err
		r.t.Fatalf("make exited (%v) before %s:\n%s", err, what, r.Text())
	case <-ctx.Done():
		r.t.Fatalf("no %s within the time:\n%s", what, r.Text())
	}
}

// Wait waits, at most timeout, for make to exit, and fails the test unless it succeeded.
func (r *Run) Wait(timeout time.Duration) {
	r.t.Helper()
	select {
	case err := <-r.exited:
		r.exited <- err
		if err != nil {
			r.t.Errorf("make: %v\n%s", err, r.Text())
		}
	case <-time.After(timeout):
		r.t.Fatalf("make still running after %s:\n%s", timeout, r.Text())
	}
}

// Interrupt presses Ctrl-C and waits for make to end, which it must do on its own within 3
// minutes, as it does: make waits for its recipe's program, then ends by the signal. The program
// must have ended without an error: make then says "Error", not "Interrupt".
func (r *Run) Interrupt() {
	r.t.Helper()
	syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT)
	select {
	case err := <-r.exited:
		r.exited <- err
		var exit *exec.ExitError
		interrupted := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT
		if err != nil && !interrupted || strings.Contains(r.Text(), "] Error ") {
			r.t.Errorf("make after Ctrl-C: %v\n%s", err, r.Text())
		}
	case <-time.After(3 * time.Minute):
		r.t.Fatalf("make still running 3 minutes after Ctrl-C:\n%s", r.Text())
	}
}

// Text is what make printed so far.
func (r *Run) Text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// Has checks that make printed each of lines (a part of a line each).
func (r *Run) Has(lines ...string) {
	r.t.Helper()
	text := r.Text()
	for _, line := range lines {
		if !strings.Contains(text, line) {
			r.t.Errorf("make's output lacks %q:\n%s", line, text)
		}
	}
}

// Kubeconfig is the path after the first `export KUBECONFIG=` make printed, or "".
func (r *Run) Kubeconfig() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, line := range r.lines {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
			return path
		}
	}
	return ""
}

// LeftBehind checks that nothing of a session whose files were in dir is left: the directory,
// or a process whose command line names it.
func LeftBehind(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the session's directory %s is still there (%v)", dir, err)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		if line := strings.ReplaceAll(string(cmdline), "\x00", " "); strings.Contains(line, dir) {
			t.Errorf("a process of the session is left: %s: %s", e.Name(), line)
		}
	}
}

// withoutMake is env less the variables by which an outer make hands its jobserver down.
func withoutMake(env []string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if name != "MAKEFLAGS" && name != "MFLAGS" && name != "MAKELEVEL" {
			out = append(out, kv)
		}
	}
	return out
}
