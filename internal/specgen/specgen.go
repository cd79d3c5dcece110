// Package specgen makes random specs of the workload kinds for property tests: each field is
// left out, set to a typical value, or set to a value at the edge of what Kubernetes takes
// (fractional GPUs, toleration operators without keys, label values with spaces, ...). Some
// specs are valid and some are not; a property test keeps those that validation accepts and
// shows that the API server takes what they render.
package specgen

import (
	"math/rand/v2"
	"strings"

	"evals.si/operator/evalsi"
)

// Gen draws specs from a seeded source, so a failing case is reproduced from its seed.
type Gen struct{ r *rand.Rand }

// New returns a generator seeded with seed.
func New(seed uint64) *Gen { return &Gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

// pick returns one of options.
func pick[T any](g *Gen, options ...T) T { return options[g.r.IntN(len(options))] }

// maybe reports true with probability p.
func (g *Gen) maybe(p float64) bool { return g.r.Float64() < p }

// set stores v under key in m with probability p.
func (g *Gen) set(m map[string]any, key string, p float64, v func() any) {
	if g.maybe(p) {
		m[key] = v()
	}
}

// Evaluator returns an Evaluator spec.
func (g *Gen) Evaluator() map[string]any {
	spec := map[string]any{}
	g.pool(spec)
	g.set(spec, "image", 0.3, func() any {
		return pick(g, "evalsi/judge:1", "registry.example/team/judge@sha256:"+strings.Repeat("a", 64))
	})
	g.set(spec, "args", 0.3, func() any { return []any{pick(g, "--judge=gpt-4o", "--pooling=none", "--pool=other", "-v")} })
	g.set(spec, "serviceAccountName", 0.2, func() any { return pick(g, "judge", "judge.team-a", "default") })
	g.set(spec, "sandboxClass", 0.2, func() any { return pick(g, "gvisor", "landlock") })
	g.set(spec, "env", 0.5, func() any { return g.env() })
	return spec
}

// SandboxClass returns a SandboxClass spec.
func (g *Gen) SandboxClass() map[string]any {
	spec := map[string]any{"rung": pick(g, "pod", "bubblewrap", "landlock", "landlock")}
	g.pool(spec)
	g.set(spec, "userNamespaces", 0.3, func() any { return g.maybe(0.5) })
	g.set(spec, "runtimeClassName", 0.2, func() any { return pick(g, "gvisor", "kata.fc") })
	return spec
}

// CheckpointServer returns a CheckpointServer spec.
func (g *Gen) CheckpointServer() map[string]any {
	spec := map[string]any{"model": pick(g, "Qwen/Qwen2.5-0.5B-Instruct", "/checkpoints/run-1/step-100", "org/adapter")}
	g.set(spec, "checkpointClaim", 0.6, func() any { return pick(g, "ckpts", "run-17.checkpoints") })
	g.set(spec, "servedModelName", 0.3, func() any { return pick(g, "run-1", "Org/Model-7B") })
	g.set(spec, "lora", 0.2, func() any {
		l := map[string]any{"baseModel": pick(g, "meta-llama/Llama-3.1-8B-Instruct", "/checkpoints/base")}
		g.set(l, "maxLoraRank", 0.5, func() any { return int64(pick(g, 8, 64)) })
		return l
	})
	g.set(spec, "apiKeySecret", 0.4, func() any {
		s := map[string]any{"name": pick(g, "vllm-key", "vllm.keys")}
		g.set(s, "key", 0.5, func() any { return pick(g, "api-key", "team_a.key", "bad key") })
		return s
	})
	g.set(spec, "gpus", 0.5, func() any { return int64(g.r.IntN(4)) })
	g.set(spec, "replicas", 0.3, func() any { return int64(g.r.IntN(3)) })
	g.set(spec, "port", 0.2, func() any { return int64(pick(g, 8000, 8080, 9000)) })
	g.set(spec, "extraArgs", 0.4, func() any {
		return []any{pick(g, "--max-model-len=4096", "--enforce-eager", "--gpu-memory-utilization=0.9", "--port=9000", "--api-key=x")}
	})
	g.set(spec, "env", 0.4, func() any { return g.env() })
	g.set(spec, "resources", 0.5, func() any { return g.resources() })
	g.scheduling(spec)
	return spec
}

// pool fills in the fields every pool has: replicas or autoscaling, resources, scheduling.
func (g *Gen) pool(spec map[string]any) {
	switch g.r.IntN(3) {
	case 0:
		spec["replicas"] = int64(g.r.IntN(4))
	case 1:
		spec["autoscaling"] = g.autoscaling()
	}
	g.set(spec, "resources", 0.5, func() any { return g.resources() })
	g.scheduling(spec)
}

func (g *Gen) autoscaling() map[string]any {
	a := map[string]any{"maxReplicas": int64(1 + g.r.IntN(5))}
	g.set(a, "minReplicas", 0.6, func() any { return int64(g.r.IntN(4)) })
	g.set(a, "idleReplicas", 0.3, func() any { return int64(0) })
	g.set(a, "targetQueueDepth", 0.3, func() any { return int64(1 + g.r.IntN(20)) })
	g.set(a, "pollingInterval", 0.3, func() any { return pick(g, "15s", "1m", "1500ms") })
	g.set(a, "cooldownPeriod", 0.3, func() any { return pick(g, "5m", "300s", "90.5s") })
	g.set(a, "fallback", 0.3, func() any {
		f := map[string]any{"replicas": int64(g.r.IntN(3))}
		g.set(f, "failureThreshold", 0.5, func() any { return int64(1 + g.r.IntN(5)) })
		return f
	})
	return a
}

func (g *Gen) resources() map[string]any {
	names := []string{"cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "hugepages-2Mi", "example.com/fpga"}
	values := []any{"0", "1", "500m", "0.5", "2", "1Gi", "512Mi", "64Mi", int64(1), 2.5, "-1"}
	out := map[string]any{}
	for _, side := range []string{"requests", "limits"} {
		if !g.maybe(0.7) {
			continue
		}
		m := map[string]any{}
		for range 1 + g.r.IntN(3) {
			m[pick(g, names...)] = pick(g, values...)
		}
		out[side] = m
	}
	return out
}

func (g *Gen) scheduling(spec map[string]any) {
	g.set(spec, "nodeSelector", 0.3, func() any {
		return map[string]any{
			pick(g, "pool", "topology.kubernetes.io/zone", "example.com/tier", "bad key"): pick(g, "", "x", "us-east-1a", "has space", strings.Repeat("v", 64)),
		}
	})
	g.set(spec, "tolerations", 0.4, func() any {
		var ts []any
		for range 1 + g.r.IntN(2) {
			t := map[string]any{}
			g.set(t, "key", 0.7, func() any { return pick(g, "gpu", "nvidia.com/gpu", "node.kubernetes.io/unreachable", "bad key") })
			g.set(t, "operator", 0.8, func() any { return pick(g, "Exists", "Equal") })
			g.set(t, "value", 0.4, func() any { return pick(g, "yes", "v1.2", "a b") })
			g.set(t, "effect", 0.6, func() any { return pick(g, "NoSchedule", "NoExecute", "PreferNoSchedule") })
			g.set(t, "tolerationSeconds", 0.2, func() any { return int64(pick(g, 0, 30, 300)) })
			ts = append(ts, t)
		}
		return ts
	})
	g.set(spec, "affinity", 0.3, func() any { return g.affinity() })
}

func (g *Gen) affinity() map[string]any {
	a := map[string]any{}
	g.set(a, "nodeAffinity", 0.6, func() any {
		op := pick(g, "In", "NotIn", "Exists", "DoesNotExist", "Gt")
		expr := map[string]any{"key": pick(g, "topology.kubernetes.io/zone", "cpu-count", "bad key"), "operator": op}
		g.set(expr, "values", 0.7, func() any { return pick(g, []any{"a", "b"}, []any{"8"}, []any{}) })
		term := map[string]any{"matchExpressions": []any{expr}}
		if g.maybe(0.5) {
			return map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{term}}}
		}
		return map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{
			map[string]any{"weight": int64(pick(g, 0, 1, 50, 100)), "preference": term},
		}}
	})
	g.set(a, "podAntiAffinity", 0.5, func() any {
		term := map[string]any{}
		g.set(term, "topologyKey", 0.8, func() any { return pick(g, "kubernetes.io/hostname", "topology.kubernetes.io/zone") })
		g.set(term, "labelSelector", 0.7, func() any {
			return map[string]any{"matchLabels": map[string]any{pick(g, "app", evalsi.LabelInstance): pick(g, "judge", "bad value!")}}
		})
		return map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{
			map[string]any{"weight": int64(pick(g, 1, 100, 101)), "podAffinityTerm": term},
		}}
	})
	return a
}

func (g *Gen) env() []any {
	var out []any
	for range 1 + g.r.IntN(3) {
		e := map[string]any{"name": pick(g, "A", "TOKEN", "LOG_LEVEL", "EVALSI_PROJECT", "HF_TOKEN", "VLLM_API_KEY")}
		switch g.r.IntN(6) {
		case 0:
			e["value"] = pick(g, "", "1", "debug")
		case 1:
			e["valueFrom"] = map[string]any{"secretKeyRef": map[string]any{"name": pick(g, "creds", "team.creds", ""), "key": pick(g, "token", "api_key", "bad/key")}}
		case 2:
			e["valueFrom"] = map[string]any{"configMapKeyRef": map[string]any{"name": "settings", "key": pick(g, "level", "settings.json")}}
		case 3:
			e["valueFrom"] = map[string]any{"fieldRef": map[string]any{"fieldPath": pick(g, "metadata.name", "status.podIP", "metadata.labels['team']", "spec.containers")}}
		case 4:
			r := map[string]any{"resource": pick(g, "limits.memory", "requests.cpu", "limits.gpu")}
			g.set(r, "divisor", 0.5, func() any { return pick(g, "1Mi", "1m", "3") })
			e["valueFrom"] = map[string]any{"resourceFieldRef": r}
		case 5:
			e["valueFrom"] = map[string]any{}
		}
		out = append(out, e)
	}
	return out
}
