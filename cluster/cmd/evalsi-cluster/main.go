// Command evalsi-cluster runs the test control plane in the foreground (`make cluster`): it prints
// the kubeconfig path and stops everything on Ctrl-C. With -build-only it builds (or finds in the
// cache) every binary the tests run and exits: `make test` runs it first, so that a cold
// machine's build shows its progress instead of a silent `go test`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"evals.si/operator/cluster"
)

func main() {
	nodes := flag.Int("nodes", 1, "KWOK nodes")
	gpus := flag.String("gpus", "", "nvidia.com/gpu capacity of each node (empty: none)")
	crds := flag.String("crds", "chart/evalsi-crds/files/crds", "directory of CRDs to install (empty: none)")
	keda := flag.Bool("keda", true, "install KEDA's ScaledObject CRD")
	buildOnly := flag.Bool("build-only", false, "build the control plane's binaries and the tools into the cache, then exit")
	tool := flag.String("tool", "", "print the path of a tool (helm, cosign, actionlint, promtool, prometheus), building it first if the cache lacks it, then exit")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *tool != "" {
		path, err := toolPath(ctx, *tool)
		if err != nil {
			fmt.Fprintln(os.Stderr, "evalsi-cluster:", err)
			os.Exit(1)
		}
		fmt.Println(path)
		return
	}
	if *buildOnly {
		if err := buildAll(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "evalsi-cluster:", err)
			os.Exit(1)
		}
		return
	}
	if err := serve(ctx, *nodes, *gpus, *crds, *keda); err != nil {
		fmt.Fprintln(os.Stderr, "evalsi-cluster:", err)
		os.Exit(1)
	}
}

// serve starts a control plane of nodes KWOK nodes (each with gpus nvidia.com/gpu when not
// empty), with the CRDs of the directory crds and KEDA's, and stops it when ctx ends.
func serve(ctx context.Context, nodes int, gpus, crds string, keda bool) error {
	opts := cluster.Options{Nodes: nodes, Progress: os.Stderr}
	if gpus != "" {
		opts.NodeCapacity = map[string]string{"nvidia.com/gpu": gpus}
	}
	if crds != "" {
		opts.CRDDirs = []string{crds}
	}
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Stop()
	if keda {
		if err := c.InstallKedaCRDs(ctx); err != nil {
			return fmt.Errorf("installing KEDA's CRDs: %w", err)
		}
	}
	fmt.Printf("control plane ready; in another shell:\n  export KUBECONFIG=%s\n  kubectl get nodes\nCtrl-C stops it.\n", c.Kubeconfig)
	<-ctx.Done()
	return nil
}

// buildAll builds every binary the tests need, with a line of progress every 30 s. The control
// plane (with helm and kubectl, one go build), KEDA and the other tools build side by side: each
// is a go build that leaves cores idle while it downloads modules and links.
func buildAll(ctx context.Context) error {
	start := time.Now()
	fmt.Fprintln(os.Stderr, "test binaries: building what the cache lacks (a cold machine: see README.md)")
	builds := map[string]func() error{
		"control plane": func() error { _, err := cluster.EnsureAssets(ctx, os.Stderr, true); return err },
		"KEDA":          func() error { _, _, err := cluster.Keda(ctx, os.Stderr); return err },
		"real node":     func() error { _, err := cluster.EnsureNodeBinaries(ctx, os.Stderr); return err },
	}
	for _, t := range []string{"cosign", "actionlint", "promtool"} {
		builds[t] = func() error { _, err := toolPath(ctx, t); return err }
	}
	errs := make(chan error, len(builds))
	for name, build := range builds {
		go func() {
			if err := build(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
			errs <- nil
		}()
	}
	var failed []error
	for range builds {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if err := errors.Join(failed...); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "test binaries ready in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// toolPath returns the path of a tool the tests or the release use, building it if needed.
func toolPath(ctx context.Context, name string) (string, error) {
	tools := map[string]func(context.Context, io.Writer) (string, error){
		"helm": cluster.Helm, "cosign": cluster.Cosign, "actionlint": cluster.Actionlint, "promtool": cluster.Promtool, "prometheus": cluster.Prometheus,
	}
	get, ok := tools[name]
	if !ok {
		return "", fmt.Errorf("unknown tool %q (helm, cosign, actionlint, promtool, prometheus)", name)
	}
	return get(ctx, os.Stderr)
}
