package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"evals.si/operator/cluster"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/manifest"
)

// TestMakeDevBringsExamplesToReady types README's first command: `make dev` in the checkout,
// with no arguments, as a newcomer does. The Makefile builds the dev program and runs it; the test
// reads the table it prints until every example is Ready, then presses Ctrl-C (SIGINT to the
// foreground process group, make's and the program's) and finds nothing of the session left: no
// process naming its cluster directory, and no directory.
func TestMakeDevBringsExamplesToReady(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	run := makeDev(t)
	run.waitReady(ctx)
	run.interrupt()

	run.outputHas("admission webhook serving on", "admission policies applied", "export KUBECONFIG=",
		"every run's result is SIMULATED", "(simulated: the reference evalsid ran no evaluator")
	dir := run.session.clusterDir()
	if dir == "" {
		t.Fatalf("make dev printed no KUBECONFIG:\n%s", run.session.text())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the session's directory %s is still there after Ctrl-C (%v)", dir, err)
	}
	if left := processesNaming(dir); len(left) > 0 {
		t.Errorf("processes of the session left after Ctrl-C:\n%s", strings.Join(left, "\n"))
	}
}

// devRun is one `make dev` started by a test, in a process group of its own as a shell's
// foreground job is.
type devRun struct {
	t       *testing.T
	cmd     *exec.Cmd
	session *devSession
	exited  chan error
}

// makeDev starts `make dev` in the checkout with args after the target (DEV_ARGS=...), and
// kills what is left of it when the test ends.
func makeDev(t *testing.T, args ...string) *devRun {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the dev program and starts a control plane")
	}
	root, err := cluster.Checkout()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", root, "dev"}, args...)...)
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
	r := &devRun{t: t, cmd: cmd, session: &devSession{want: exampleCount(t, root), ready: make(chan struct{})}, exited: make(chan error, 1)}
	go func() {
		r.session.read(out)
		r.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // nothing, once it exited
	})
	return r
}

// waitReady waits until a table make dev printed shows every example Ready.
func (r *devRun) waitReady(ctx context.Context) {
	r.t.Helper()
	select {
	case <-r.session.ready:
	case err := <-r.exited:
		r.t.Fatalf("make dev exited before the examples were Ready (%v):\n%s", err, r.session.text())
	case <-ctx.Done():
		r.t.Fatalf("the examples were not all Ready within the time:\n%s", r.session.text())
	}
}

// interrupt presses Ctrl-C and waits for make dev to end, which it must do on its own, at once
// and with success.
func (r *devRun) interrupt() {
	r.t.Helper()
	syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT)
	select {
	case err := <-r.exited:
		if err != nil {
			r.t.Errorf("make dev after Ctrl-C: %v\n%s", err, r.session.text())
		}
	case <-time.After(3 * time.Minute):
		r.t.Fatalf("make dev still running 3 minutes after Ctrl-C:\n%s", r.session.text())
	}
}

// outputHas checks that make dev printed each of lines.
func (r *devRun) outputHas(lines ...string) {
	r.t.Helper()
	text := r.session.text()
	for _, line := range lines {
		if !strings.Contains(text, line) {
			r.t.Errorf("make dev's output lacks %q:\n%s", line, text)
		}
	}
}

// exampleCount is the number of evals.si resources in testdata/examples, each a row of the table.
func exampleCount(t *testing.T, root string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "testdata/examples/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifest.ReadAll(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range docs {
		if d.Object.GroupVersionKind().Group == evalsi.Group {
			n++
		}
	}
	if n == 0 {
		t.Fatal("testdata/examples holds no evals.si resource")
	}
	return n
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

// devSession is what make dev printed, read line by line as it comes.
type devSession struct {
	want  int
	ready chan struct{} // closed once a table shows want rows, all Ready

	mu    sync.Mutex
	lines []string
}

// read takes in r's lines and closes ready once a table shows every example Ready. A table is
// tabwriter's, after a line with the time: a header naming the columns, then a row a resource.
func (s *devSession) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	readyAt := -1 // the READY column's offset in the current table, -1 outside one
	var rows, readyRows int
	closed := false
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		s.lines = append(s.lines, line)
		s.mu.Unlock()
		switch {
		case strings.HasPrefix(line, "KIND ") && strings.Contains(line, " READY "):
			readyAt, rows, readyRows = strings.Index(line, " READY ")+1, 0, 0
		case readyAt < 0:
		case strings.TrimSpace(line) == "" || len(line) <= readyAt:
			readyAt = -1 // the time line before the next table, or what follows the last
		default:
			rows++
			if strings.HasPrefix(line[readyAt:], "True ") || line[readyAt:] == "True" {
				readyRows++
			}
			if !closed && rows == s.want && readyRows == rows {
				close(s.ready)
				closed = true
			}
		}
	}
}

func (s *devSession) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// clusterDir is the directory of the session's control plane, from the KUBECONFIG it printed.
func (s *devSession) clusterDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, line := range s.lines {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
			return filepath.Dir(path)
		}
	}
	return ""
}

// processesNaming lists the processes whose command line names dir.
func processesNaming(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		line := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(line, dir) {
			out = append(out, fmt.Sprintf("%s: %s", e.Name(), line))
		}
	}
	return out
}
