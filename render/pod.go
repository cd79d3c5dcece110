package render

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
)

// The programs pool pods run, by name on the platform image's PATH (docs/image.md): the
// platform's worker programs, which the platform image adds to this repository's image. The
// operator sets them as the container's command, so the image's entrypoint (evalsi-operator)
// does not matter to pools.
const (
	// EvaluatorCommand runs an Evaluator's pool: `evaluator --pool=<name> [spec.args]`.
	EvaluatorCommand = "evaluator"
	// SandboxdCommand runs a SandboxClass's pool: `sandboxd --rung=<rung> --class=<name>`.
	SandboxdCommand = "sandboxd"
	// OperatorCommand is this repository's binary, in every platform and plugin image: sandbox
	// pools run its `probe` first.
	OperatorCommand = evalsi.OperatorBinary
)

// Scheduling is where a pool's pods may run, passed through to the pod spec as written.
type Scheduling struct {
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	Tolerations  []Toleration      `json:"tolerations,omitempty"`
	Affinity     map[string]any    `json:"affinity,omitempty"`
}

// apply sets the scheduling fields on a pod spec.
func (s Scheduling) apply(pod map[string]any) {
	setIf(pod, "nodeSelector", s.NodeSelector)

	if len(s.Tolerations) > 0 {
		ts := make([]any, len(s.Tolerations))
		for i, t := range s.Tolerations {
			ts[i] = t.render()
		}
		pod["tolerations"] = ts
	}
	setIf(pod, "affinity", s.Affinity)
}

// EnvVar is a container environment variable: a value, or valueFrom as Kubernetes takes it.
type EnvVar struct {
	Name      string         `json:"name"`
	Value     string         `json:"value,omitempty"`
	ValueFrom map[string]any `json:"valueFrom,omitempty"`
}

// envList renders fixed variables first, then the user's, in the order given.
func envList(fixed []EnvVar, user []EnvVar) []any {
	var out []any
	for _, list := range [][]EnvVar{fixed, user} {
		for _, e := range list {
			v := map[string]any{"name": e.Name}
			// An empty value is stored as no value; render it so, or it would look like drift.
			if e.ValueFrom != nil {
				v["valueFrom"] = e.ValueFrom
			} else if e.Value != "" {
				v["value"] = e.Value
			}
			out = append(out, v)
		}
	}
	return out
}

// restrictedPod is a pod security context that passes Pod Security `restricted`.
func restrictedPod() map[string]any {
	return map[string]any{
		"runAsNonRoot":   true,
		"runAsUser":      int64(65532),
		"runAsGroup":     int64(65532),
		"fsGroup":        int64(65532),
		"seccompProfile": map[string]any{"type": "RuntimeDefault"},
	}
}

// restrictedContainer is a container security context that passes Pod Security `restricted`,
// with a read-only root filesystem.
func restrictedContainer() map[string]any {
	return map[string]any{
		"allowPrivilegeEscalation": false,
		"readOnlyRootFilesystem":   true,
		"runAsNonRoot":             true,
		"capabilities":             map[string]any{"drop": []any{"ALL"}},
		"seccompProfile":           map[string]any{"type": "RuntimeDefault"},
	}
}

// tmpVolume is a writable /tmp for containers with a read-only root filesystem.
func tmpVolume() (volume, mount map[string]any) {
	return map[string]any{"name": "tmp", "emptyDir": map[string]any{}},
		map[string]any{"name": "tmp", "mountPath": "/tmp"}
}

// deployment returns a Deployment of one pod template; replicas is omitted when nil (a
// ScaledObject owns it).
func (o Owner) deployment(name, namespace, component string, replicas *int32, strategy string, pod map[string]any) *unstructured.Unstructured {
	spec := map[string]any{
		"selector": map[string]any{"matchLabels": o.selector()},
		"template": map[string]any{
			"metadata": map[string]any{"labels": o.labels(component)},
			"spec":     pod,
		},
		"revisionHistoryLimit": int64(3),
	}
	if replicas != nil {
		spec["replicas"] = int64(*replicas)
	}
	if strategy != "" {
		spec["strategy"] = map[string]any{"type": strategy}
	}
	return o.object("apps/v1", "Deployment", name, namespace, component, map[string]any{"spec": spec})
}
