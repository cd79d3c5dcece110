package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// kwokAnnotation marks the nodes that KWOK manages.
const kwokAnnotation = "kwok.x-k8s.io/node"

var (
	nodesGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	getOpts  = metav1.GetOptions{}
)

// defaultCapacity is a KWOK node's capacity unless Options.NodeCapacity overrides it.
var defaultCapacity = map[string]string{"cpu": "64", "memory": "256Gi", "pods": "1000"}

// AddNodes creates n more KWOK nodes with the given capacity (merged over the defaults) and waits
// until they are Ready.
func (c *Cluster) AddNodes(ctx context.Context, n int, capacity map[string]string) error {
	return c.addNodes(ctx, n, capacity, nil)
}

// addNodes is AddNodes, the nodes with taints.
func (c *Cluster) addNodes(ctx context.Context, n int, capacity map[string]string, taints []corev1.Taint) error {
	cap := maps.Clone(defaultCapacity)
	maps.Copy(cap, capacity)
	nodes := c.Dynamic().Resource(nodesGVR)
	var names []string
	for range n {
		name := fmt.Sprintf("kwok-node-%d", c.nodeCount)
		c.nodeCount++
		node := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1",
			"kind":       "Node",
			"metadata": map[string]any{
				"name":        name,
				"annotations": map[string]any{kwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
				"labels": map[string]any{
					"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"type": "kwok",
				},
			},
			"spec": map[string]any{"taints": taintsAny(taints)},
			"status": map[string]any{
				"capacity":    toAny(cap),
				"allocatable": toAny(cap),
			},
		}}
		if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		err := c.pollKwok(ctx, func(ctx context.Context) error {
			node, err := nodes.Get(ctx, name, getOpts)
			if err != nil {
				return err
			}
			if !conditionTrue(node, "Ready") {
				return fmt.Errorf("node %s is not Ready", name)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// pollKwok polls check as the running KWOK's process does (process.poll), and goes on with the
// one superviseKwok starts when it exits.
func (c *Cluster) pollKwok(ctx context.Context, check func(context.Context) error) error {
	for range kwokRestarts + 1 {
		kwok := c.process("kwok")
		if kwok == nil {
			return errors.New("no kwok runs: the cluster is stopped")
		}
		err := kwok.poll(ctx, 100*time.Millisecond, check)
		if err == nil || !kwok.exited() || ctx.Err() != nil {
			return err
		}
		// Wait for its successor.
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return c.process("kwok") != kwok, nil
		}); err != nil {
			return kwok.failure(err)
		}
	}
	return c.process("kwok").failure(errors.New("it exited too often"))
}

// conditionTrue reports whether obj's status condition of type t is True.
func conditionTrue(obj *unstructured.Unstructured, t string) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == t && m["status"] == "True" {
			return true
		}
	}
	return false
}

// taintsAny is taints as a Node's spec.taints holds them, nil when none.
func taintsAny(taints []corev1.Taint) []any {
	var out []any
	for _, t := range taints {
		m := map[string]any{"key": t.Key, "effect": string(t.Effect)}
		if t.Value != "" {
			m["value"] = t.Value
		}
		out = append(out, m)
	}
	return out
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
