package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// startTimeout bounds building (first run only) and starting a control plane for a test package.
const startTimeout = 45 * time.Minute

// Main is a test package's TestMain: it starts one control plane with opts, stores it in *shared
// for the package's tests, runs them and stops it. Use: `os.Exit(cluster.Main(m, opts, &env))`.
func Main(m *testing.M, opts Options, shared **Cluster) int {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	c, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		return 1
	}
	defer c.Stop()
	*shared = c
	return m.Run()
}

// Eventually calls check every 100ms until it returns nil, and fails the test with the last
// error when ctx ends first.
func Eventually(t testing.TB, ctx context.Context, what string, check func() error) {
	t.Helper()
	var err error
	for {
		if err = check(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
