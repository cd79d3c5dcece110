package release

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Registry is an OCI registry on a loopback port, in memory: crane's `registry serve`, where the
// dry run pushes the image, signs it and attaches its SBOM as the release workflow does in the
// project's registry.
type Registry struct {
	// Addr is its host:port.
	Addr string
	cmd  *exec.Cmd
	log  *strings.Builder
}

// StartRegistry serves a registry with crane until Stop.
func StartRegistry(ctx context.Context, crane string) (*Registry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	r := &Registry{Addr: addr, log: &strings.Builder{}}
	r.cmd = exec.Command(crane, "registry", "serve", "--address", addr)
	r.cmd.Env = os.Environ()
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the registry: %w", err)
	}
	for range 100 {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return r, nil
		}
		select {
		case <-ctx.Done():
			r.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.Stop()
	return nil, fmt.Errorf("the registry did not listen on %s within 10s:\n%s", addr, r.log)
}

// Stop ends the registry and everything pushed to it.
func (r *Registry) Stop() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
}
