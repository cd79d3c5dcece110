package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/checkout"
	"evals.si/operator/internal/maketest"
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
	run, ready := makeDev(t)
	run.Until(ctx, "every example Ready", ready)
	run.Interrupt()
	if strings.Contains(run.Text(), "evalsi-dev: ") {
		t.Errorf("the dev program ended with an error:\n%s", run.Text())
	}

	run.Has("admission webhook serving on", "admission policies applied", "export KUBECONFIG=",
		"every run's result is SIMULATED", "(simulated: the reference evalsid ran no evaluator")
	kubeconfig := run.Kubeconfig()
	if kubeconfig == "" {
		t.Fatalf("make dev printed no KUBECONFIG:\n%s", run.Text())
	}
	maketest.LeftBehind(t, filepath.Dir(kubeconfig))
}

// makeDev starts `make dev` with args after the target (DEV_ARGS=...); ready closes once a table
// it printed shows every example Ready.
func makeDev(t *testing.T, args ...string) (run *maketest.Run, ready <-chan struct{}) {
	return makeDevExcept(t, nil, args...)
}

// makeDevExcept is makeDev, with the examples named in notReady ("Kind name") waited for without
// being Ready.
func makeDevExcept(t *testing.T, notReady []string, args ...string) (run *maketest.Run, ready <-chan struct{}) {
	t.Helper()
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	table := &devTable{want: exampleCount(t, root), notReady: notReady, ready: make(chan struct{})}
	return maketest.Start(t, table.read, append([]string{"dev"}, args...)...), table.ready
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

// devTable reads the tables make dev prints, each tabwriter's after a line with the time: a
// header naming the columns, then a row a resource.
type devTable struct {
	want     int
	notReady []string      // the rows ("Kind name") that need not be Ready
	ready    chan struct{} // closed once a table shows want rows, all Ready

	once            sync.Once
	readyAt         int // the READY column's offset in the current table; 0 outside one
	rows, readyRows int
}

// name is the NAME cell of a row: the last field before the READY column.
func name(line string, readyAt int) string {
	f := strings.Fields(line[:readyAt])
	return f[len(f)-1]
}

// read takes in one line of make dev's output.
func (d *devTable) read(line string) {
	switch {
	case strings.HasPrefix(line, "KIND ") && strings.Contains(line, " READY "):
		d.readyAt, d.rows, d.readyRows = strings.Index(line, " READY ")+1, 0, 0
	case d.readyAt == 0:
	case strings.TrimSpace(line) == "" || len(line) <= d.readyAt:
		d.readyAt = 0 // the time line before the next table, or what follows the last
	default:
		d.rows++
		fields := strings.Fields(line)
		if cell := line[d.readyAt:]; cell == "True" || strings.HasPrefix(cell, "True ") || slices.Contains(d.notReady, fields[0]+" "+name(line, d.readyAt)) {
			d.readyRows++
		}
		if d.rows == d.want && d.readyRows == d.rows {
			d.once.Do(func() { close(d.ready) })
		}
	}
}
