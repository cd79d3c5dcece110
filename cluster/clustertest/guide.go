package clustertest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"evals.si/operator/cluster"
	"evals.si/operator/internal/guide"
)

// RunGuideSection runs the shell blocks of the section title of the Markdown guide at path as a
// reader pastes them, against c: c's kubectl first on PATH, KUBECONFIG c's, and vars (NAME=value)
// beside them. The test fails at the first block that fails, with its output.
func RunGuideSection(t testing.TB, ctx context.Context, c *cluster.Cluster, path, title string, vars ...string) {
	t.Helper()
	blocks, err := guide.Blocks(path, title)
	if err != nil {
		t.Fatal(err)
	}
	tools := t.TempDir()
	if err := os.Symlink(c.Kubectl, filepath.Join(tools, "kubectl")); err != nil {
		t.Fatal(err)
	}
	env := append(append(os.Environ(), "PATH="+tools+":"+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig), vars...)
	for _, b := range blocks {
		if out, err := guide.Run(ctx, b, "", env); err != nil {
			t.Fatalf("%s: %s\nfailed: %v\n%s", title, b, err, out)
		}
	}
}
