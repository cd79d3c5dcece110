// Package checkout finds the checkout of the operator that the tests and the development
// environment run from.
package checkout

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
)

// operatorModule is the module whose checkout the tests and the development environment run from.
const operatorModule = "evals.si/operator"

// Root returns the root of the checkout that holds the working directory: the directory of the
// go.mod of the operator's module, found upwards. The development environment reads the CRDs,
// the charts and the examples from it, as they are on disk; the control plane's build takes the
// versions of the modules the operator shares with it from it.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module "+operatorModule+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not in a checkout of " + operatorModule + ": run it from the repository")
		}
		dir = parent
	}
}
