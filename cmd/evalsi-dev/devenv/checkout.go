package devenv

import (
	"fmt"
	"path/filepath"

	"evals.si/operator/internal/manifest"
)

// readDocuments reads every YAML document of the files that pattern (a glob under root) names.
func readDocuments(root, pattern string) ([]manifest.Document, error) {
	files, err := filepath.Glob(filepath.Join(root, pattern))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no files %s in %s (%v)", pattern, root, err)
	}
	return manifest.ReadAll(files, nil)
}
