package devenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"evals.si/operator/internal/manifest"
)

// module is the module path whose checkout the development environment runs from.
const module = "evals.si/operator"

// Checkout returns the root of the checkout that holds the working directory: the directory of
// the go.mod of this module, found upwards. The development environment reads the CRDs, the
// charts and the examples from it, as they are on disk: an example edited is applied as edited.
func Checkout() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module "+module+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not in a checkout of " + module + ": run make dev from the repository")
		}
		dir = parent
	}
}

// readDocuments reads every YAML document of the files that pattern (a glob under root) names.
func readDocuments(root, pattern string) ([]manifest.Document, error) {
	files, err := filepath.Glob(filepath.Join(root, pattern))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no files %s in %s (%v)", pattern, root, err)
	}
	return manifest.ReadAll(files, nil)
}
