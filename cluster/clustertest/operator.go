package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// builds are the binaries built by this test process, by module directory and package; Main
// removes them.
var builds struct {
	mu   sync.Mutex
	bins map[string]*build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Operator returns the evalsi-operator binary, built once per test process as a release builds it
// (-trimpath, no cgo), so that it shares the build cache with `make release-dry-run`.
func Operator(t testing.TB) string { return Binary(t, "", "evals.si/operator") }

// Binary returns the binary of the main package pkg of the module in dir ("" for the test's own),
// built once per test process as Operator is, into a temporary directory that Main removes.
func Binary(t testing.TB, dir, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*build{}
	}
	b := builds.bins[dir+"|"+pkg]
	if b == nil {
		b = &build{}
		builds.bins[dir+"|"+pkg] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() {
		out, err := binDir()
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(out, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-trimpath", "-o", b.path, pkg)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %v\n%s", pkg, err, msg)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// binDirPrefix starts the name of the directory of a test process's binaries, in the machine's
// temporary directory; the process's id ends it.
const binDirPrefix = "evalsi-test-bin-"

// binDir makes a new directory for a binary of this process, first removing those of processes
// that are gone (killed, or a package without Main).
func binDir() (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), binDirPrefix), "-")
		if _, err := os.Stat(filepath.Join("/proc", pid)); err != nil {
			os.RemoveAll(d)
		}
	}
	return os.MkdirTemp("", binDirPrefix+strconv.Itoa(os.Getpid())+"-")
}

// removeBuilds removes every binary Binary built.
func removeBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	for _, b := range builds.bins {
		if b.path != "" {
			os.RemoveAll(filepath.Dir(b.path))
		}
	}
}
