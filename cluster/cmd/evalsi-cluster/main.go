// Command evalsi-cluster runs the test control plane in the foreground (`make cluster`): it prints
// the kubeconfig path and stops everything on Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"evals.si/operator/cluster"
)

func main() {
	nodes := flag.Int("nodes", 1, "KWOK nodes")
	gpus := flag.String("gpus", "", "nvidia.com/gpu capacity of each node (empty: none)")
	crds := flag.String("crds", "chart/evalsi-crds/files/crds", "directory of CRDs to install (empty: none)")
	keda := flag.Bool("keda", true, "install KEDA's ScaledObject CRD")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := cluster.Options{Nodes: *nodes, Progress: os.Stderr}
	if *gpus != "" {
		opts.NodeCapacity = map[string]string{"nvidia.com/gpu": *gpus}
	}
	if *crds != "" {
		opts.CRDDirs = []string{*crds}
	}
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "evalsi-cluster:", err)
		os.Exit(1)
	}
	defer c.Stop()
	if *keda {
		if err := c.InstallKedaCRDs(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "evalsi-cluster:", err)
			return
		}
	}
	fmt.Printf("control plane ready; in another shell:\n  export KUBECONFIG=%s\n  kubectl get nodes\nCtrl-C stops it.\n", c.Kubeconfig)
	<-ctx.Done()
}
