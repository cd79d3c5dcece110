// Package clustertest shares one control plane among the tests of a package, started by the first
// test that needs it, so that tests which need none (pure decisions, goldens) start no process.
// It holds the test harness apart from package cluster, so that the shipped binary links no
// testing code.
package clustertest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"evals.si/operator/cluster"
)

// startTimeout bounds building (first run only) and starting a control plane.
const startTimeout = 45 * time.Minute

// Shared is a test package's control plane, started on first use.
type Shared struct {
	opts cluster.Options
	once sync.Once
	c    *cluster.Cluster
	err  error
}

// New returns a control plane with opts that starts when a test first asks for it.
func New(opts cluster.Options) *Shared {
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	return &Shared{opts: opts}
}

// Get returns the control plane, starting it on first use; a failed start fails the test.
func (s *Shared) Get(t testing.TB) *cluster.Cluster {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		s.c, s.err = cluster.Start(ctx, s.opts)
	})
	if s.err != nil {
		t.Fatalf("starting the control plane: %v", s.err)
	}
	return s.c
}

// Main is a test package's TestMain: it runs the tests, then stops the control plane if one
// was started and removes the binaries Binary built. Use: `os.Exit(shared.Main(m))`.
func (s *Shared) Main(m *testing.M) int {
	code := m.Run()
	if s.c != nil {
		s.c.Stop()
	}
	removeBuilds()
	return code
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
