package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/maketest"
)

// TestMakeCluster types README's `make cluster`: the control plane it prints the kubeconfig of
// serves a node and the CRDs (the evals.si kinds and KEDA's ScaledObject), and Ctrl-C leaves
// nothing of it.
func TestMakeCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	ready := make(chan struct{})
	var once sync.Once
	run := maketest.Start(t, func(line string) {
		if strings.HasPrefix(line, "Ctrl-C stops it.") {
			once.Do(func() { close(ready) })
		}
	}, "cluster")
	run.Until(ctx, "the control plane ready", ready)
	kubeconfig := run.Kubeconfig()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("the kubeconfig %q make cluster printed: %v", kubeconfig, err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Errorf("nodes: %d (%v), want 1", len(nodes.Items), err)
	}
	served := map[string]bool{}
	for _, gv := range []string{"evals.si/v1alpha1", "keda.sh/v1alpha1"} {
		list, err := kube.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Errorf("%s: %v", gv, err)
			continue
		}
		for _, r := range list.APIResources {
			served[r.Kind] = true
		}
	}
	kinds := []string{"ScaledObject"}
	for _, k := range evalsi.Kinds {
		kinds = append(kinds, k.Kind)
	}
	for _, kind := range kinds {
		if !served[kind] {
			t.Errorf("make cluster's control plane serves no %s", kind)
		}
	}
	run.Interrupt()
	maketest.LeftBehind(t, filepath.Dir(kubeconfig))
}
