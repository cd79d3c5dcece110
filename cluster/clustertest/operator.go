package clustertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var operator struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// Operator returns the evalsi-operator binary, built once per test process as a release builds it
// (-trimpath, no cgo), so that it shares the build cache with `make release-dry-run`.
func Operator(t testing.TB) string {
	t.Helper()
	operator.once.Do(func() {
		dir, err := os.MkdirTemp("", "evalsi-operator-bin-")
		if err != nil {
			operator.err = err
			return
		}
		operator.path = filepath.Join(dir, "evalsi-operator")
		cmd := exec.Command("go", "build", "-trimpath", "-o", operator.path, "evals.si/operator")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		operator.out, operator.err = cmd.CombinedOutput()
	})
	if operator.err != nil {
		t.Fatalf("building the operator: %v\n%s", operator.err, operator.out)
	}
	return operator.path
}
