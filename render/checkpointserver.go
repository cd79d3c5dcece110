package render

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

// CheckpointServerSpec is a CheckpointServer's spec: a vLLM server for one checkpoint.
type CheckpointServerSpec struct {
	Image           string        `json:"image,omitempty"`
	Model           string        `json:"model"`
	ServedModelName string        `json:"servedModelName,omitempty"`
	CheckpointClaim string        `json:"checkpointClaim,omitempty"`
	Lora            *Lora         `json:"lora,omitempty"`
	APIKeySecret    *SecretKeyRef `json:"apiKeySecret,omitempty"`
	GPUs            *int32        `json:"gpus,omitempty"`
	Resources       Resources     `json:"resources,omitempty"`
	Env             []EnvVar      `json:"env,omitempty"`
	ExtraArgs       []string      `json:"extraArgs,omitempty"`
	Replicas        *int32        `json:"replicas,omitempty"`
	Port            int32         `json:"port,omitempty"`
	// Egress is where the server may connect besides cluster DNS (NetworkPolicy egress rules):
	// the model mirror or egress proxy a server that downloads its model needs. Unset, it
	// reaches nothing else.
	Egress []EgressRule `json:"egress,omitempty"`
	Scheduling
}

// Lora serves the checkpoint as a LoRA adapter on top of a base model.
type Lora struct {
	BaseModel   string `json:"baseModel"`
	MaxLoraRank int32  `json:"maxLoraRank,omitempty"`
}

// SecretKeyRef names a key of a Secret in the object's namespace.
type SecretKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key,omitempty"`
}

// Settings of a vLLM server.
const (
	defaultVLLMPort = 8000
	checkpointMount = "/checkpoints"
	// startupProbeBudget is how long a model may take to load before the pod is restarted:
	// period x failureThreshold = 30 minutes.
	startupPeriodSeconds    = 10
	startupFailureThreshold = 180
	defaultAPIKeySecretKey  = "api-key"
	gpuResource             = "nvidia.com/gpu"
	// livenessPeriodSeconds x livenessFailureThreshold is how long a loaded server may fail
	// /health before its container is restarted (a hung engine).
	livenessPeriodSeconds    = 10
	livenessFailureThreshold = 6
	// modelCache is where vLLM and Hugging Face keep downloaded weights and compiled kernels: an
	// emptyDir, so that a restarted container (a liveness failure, an OOM) does not download
	// them again.
	modelCache = "/model-cache"
)

// defaultRequests keep a server without requests out of the BestEffort class, the first evicted
// under pressure, next to the GPU jobs it serves; a spec's own request or limit of one replaces it.
var defaultRequests = map[string]Quantity{"cpu": "2", "memory": "16Gi"}

// gpus is how many GPUs the server asks for: spec.gpus, else one unless resources name
// nvidia.com/gpu themselves (a vLLM image without a GPU fails at start, or, on a node whose
// default runtime is NVIDIA's, sees every GPU of the node).
func (spec CheckpointServerSpec) gpus() int32 {
	if spec.GPUs != nil {
		return *spec.GPUs
	}
	_, inLimits := spec.Resources.Limits[gpuResource]
	_, inRequests := spec.Resources.Requests[gpuResource]
	if inLimits || inRequests {
		return 0
	}
	return 1
}

// Served is what a CheckpointServer offers to clients.
type Served struct {
	Deployment, Service string
	// Endpoint is the OpenAI-compatible base URL: the Service's cluster address with /v1.
	Endpoint string
	// ModelName is the name clients ask for.
	ModelName string
}

// vllmFlags are the vLLM flags the operator sets or that would carry a secret, each with the
// spec field (or the way) to use instead.
var vllmFlags = map[string]string{
	"--host":                 "nothing: the server listens on every address of its pod",
	"--port":                 "spec.port",
	"--model":                "spec.model (or spec.lora.baseModel)",
	"--served-model-name":    "spec.servedModelName",
	"--enable-lora":          "spec.lora",
	"--lora-modules":         "spec.lora",
	"--max-lora-rank":        "spec.lora.maxLoraRank",
	"--tensor-parallel-size": "spec.gpus",
	"-tp":                    "spec.gpus",
	"--api-key":              "spec.apiKeySecret: the key reaches vLLM as VLLM_API_KEY from the Secret, never as an argument",
	"--hf-token":             "an env variable HF_TOKEN with valueFrom.secretKeyRef: a token is never an argument",
}

// vllmEnv are the variables the operator sets or that hold a secret, with the field to use instead.
var vllmEnv = map[string]string{
	"VLLM_API_KEY":                     "spec.apiKeySecret",
	"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "spec.lora, which sets it",
	"HF_HOME":                          "nothing: the operator keeps the model cache at " + modelCache,
	"VLLM_CACHE_ROOT":                  "nothing: the operator keeps the model cache at " + modelCache,
}

// secretEnv are variables that hold a secret: they come from a Secret, never as a plain value.
var secretEnv = []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}

// check applies the CheckpointServer's rules across fields, keeps secrets out of arguments and
// plain values, and applies Kubernetes' rules for what reaches its pods.
func (spec CheckpointServerSpec) check() error {
	var ps problems
	for _, m := range []struct{ field, model string }{{"model", spec.Model}, {"lora/baseModel", ""}} {
		if m.field == "lora/baseModel" && spec.Lora != nil {
			m.model = spec.Lora.BaseModel
		}
		if strings.HasPrefix(m.model, checkpointMount+"/") && spec.CheckpointClaim == "" {
			what := "a model"
			if m.field != "model" {
				what = "a lora.baseModel"
			}
			ps.add(specPointer.at("checkpointClaim"), "%s under /checkpoints needs checkpointClaim, the claim mounted there", what)
		}
	}
	checkExtraArgs(specPointer.at("extraArgs"), spec.ExtraArgs, &ps)
	if k := spec.APIKeySecret; k != nil && k.Key != "" {
		ps.addAll(specPointer.at("apiKeySecret").at("key"), validation.IsConfigMapKey(k.Key))
	}
	if _, set := spec.Resources.Limits[gpuResource]; set && spec.GPUs != nil {
		ps.add(specPointer.at("gpus"), "set gpus or resources.limits[%s], not both", gpuResource)
	}
	if _, set := spec.Resources.Requests[gpuResource]; set && spec.GPUs != nil {
		ps.add(specPointer.at("gpus"), "set gpus or resources.requests[%s], not both", gpuResource)
	}
	spec.Resources.check(specPointer.at("resources"), &ps)
	checkEnv(specPointer.at("env"), spec.Env, vllmEnv, &ps)
	for i, e := range spec.Env {
		if slices.Contains(secretEnv, e.Name) && e.ValueFrom == nil {
			ps.add(specPointer.at("env").index(i).at("value"), "%s holds a secret: take it from a Secret with valueFrom.secretKeyRef", e.Name)
		}
	}
	spec.Scheduling.check(specPointer, &ps)
	checkEgress(specPointer.at("egress"), spec.Egress, &ps)
	return ps.err()
}

// checkExtraArgs applies the rules of vLLM's extra arguments, as a Kubernetes args list writes
// them: flags, each with its value joined by '=' or in the next item (any string, a JSON value
// included). A flag the operator sets or that would carry a secret is refused on its own item, in
// either form; the first item must be a flag.
func checkExtraArgs(p pointer, args []string, ps *problems) {
	for i, arg := range args {
		if !isFlag(arg) {
			if i == 0 {
				ps.add(p.index(i), "%q is not a flag: extraArgs begin with a flag such as --max-model-len, each followed by its value or joined to it with '='", arg)
			}
			continue // the value of the flag before it
		}
		if flag, use := ownedFlag(arg); flag != "" {
			ps.add(p.index(i), "%s is not allowed here: use %s", flag, use)
		}
	}
}

// isFlag reports whether an extra argument is a flag (-x, --name, --name=value) rather than the
// value of the flag before it; a negative number is a value.
func isFlag(arg string) bool {
	if !strings.HasPrefix(arg, "-") || arg == "-" {
		return false
	}
	_, err := strconv.ParseFloat(arg, 64)
	return err != nil
}

// ownedFlag returns the vLLM flag that arg sets, and what to use instead, when that flag is one
// of vllmFlags; vLLM reads '_' as '-' and takes unambiguous abbreviations, so both count.
func ownedFlag(arg string) (flag, use string) {
	name, _, _ := strings.Cut(arg, "=")
	name = "--" + strings.ReplaceAll(strings.TrimPrefix(name, "--"), "_", "-")
	if strings.HasPrefix(arg, "-") && !strings.HasPrefix(arg, "--") {
		name = strings.SplitN(arg, "=", 2)[0]
	}
	for _, f := range slices.Sorted(maps.Keys(vllmFlags)) {
		if name == f || (len(name) > 4 && strings.HasPrefix(f, name)) {
			return f, vllmFlags[f]
		}
	}
	return "", ""
}

// CheckpointServer renders a CheckpointServer into a vLLM Deployment and its Service, the
// service account its pods run as (no token mounted) and the NetworkPolicy that fences them
// (checkpointPolicy).
//
// vLLM images run as root and write caches under the root filesystem, so the pod keeps the
// image's user and a writable root filesystem (looser than the operator's own pods); privilege
// escalation is off, every capability is dropped and seccomp is RuntimeDefault.
func CheckpointServer(obj *unstructured.Unstructured, opts Options) ([]*unstructured.Unstructured, Served, error) {
	var spec CheckpointServerSpec
	if err := opts.decodeSpec(obj, &spec); err != nil {
		return nil, Served{}, err
	}
	if err := spec.check(); err != nil {
		return nil, Served{}, err
	}
	image := spec.Image
	if image == "" {
		image = opts.VLLMImage
	}
	if image == "" {
		return nil, Served{}, fmt.Errorf("spec.image: required (the operator has no --vllm-image)")
	}
	port := spec.Port
	if port == 0 {
		port = defaultVLLMPort
	}
	name := obj.GetName() + "-vllm"
	served := Served{
		Deployment: name,
		Service:    name,
		Endpoint:   fmt.Sprintf("http://%s.%s.svc:%d/v1", name, obj.GetNamespace(), port),
		ModelName:  spec.ServedModelName,
	}
	if served.ModelName == "" {
		served.ModelName = obj.GetName()
	}

	args := []string{"--host=0.0.0.0", "--port=" + strconv.Itoa(int(port))}
	env := []EnvVar{{Name: "HF_HOME", Value: modelCache + "/huggingface"}, {Name: "VLLM_CACHE_ROOT", Value: modelCache + "/vllm"}}
	if spec.Lora != nil {
		args = append(args, "--model="+spec.Lora.BaseModel, "--enable-lora",
			"--lora-modules="+served.ModelName+"="+spec.Model)
		if spec.Lora.MaxLoraRank > 0 {
			args = append(args, "--max-lora-rank="+strconv.Itoa(int(spec.Lora.MaxLoraRank)))
		}
		env = append(env, EnvVar{Name: "VLLM_ALLOW_RUNTIME_LORA_UPDATING", Value: "True"})
	} else {
		args = append(args, "--model="+spec.Model, "--served-model-name="+served.ModelName)
	}
	gpus := spec.gpus()
	if gpus > 1 {
		args = append(args, "--tensor-parallel-size="+strconv.Itoa(int(gpus)))
	}
	args = append(args, spec.ExtraArgs...)
	if s := spec.APIKeySecret; s != nil {
		key := s.Key
		if key == "" {
			key = defaultAPIKeySecretKey
		}
		env = append(env, EnvVar{Name: "VLLM_API_KEY", ValueFrom: map[string]any{
			"secretKeyRef": map[string]any{"name": s.Name, "key": key},
		}})
	}

	requests := maps.Clone(spec.Resources.Requests)
	if requests == nil {
		requests = map[string]Quantity{}
	}
	for name, q := range defaultRequests {
		_, requested := requests[name]
		_, limited := spec.Resources.Limits[name]
		if !requested && !limited { // a limit alone is the request too
			requests[name] = q
		}
	}
	limits := maps.Clone(spec.Resources.Limits)
	if gpus > 0 {
		if limits == nil {
			limits = map[string]Quantity{}
		}
		n := Quantity(strconv.Itoa(int(gpus)))
		limits[gpuResource], requests[gpuResource] = n, n
	}
	resources := Resources{Requests: requests, Limits: limits}.render()

	health := map[string]any{"path": "/health", "port": "http"}
	mounts := []any{
		map[string]any{"name": "dshm", "mountPath": "/dev/shm"},
		map[string]any{"name": "model-cache", "mountPath": modelCache},
	}
	volumes := []any{
		map[string]any{"name": "dshm", "emptyDir": map[string]any{"medium": "Memory"}},
		map[string]any{"name": "model-cache", "emptyDir": map[string]any{}},
	}
	if spec.CheckpointClaim != "" {
		mounts = append(mounts, map[string]any{"name": "checkpoints", "mountPath": checkpointMount, "readOnly": true})
		volumes = append(volumes, map[string]any{"name": "checkpoints", "persistentVolumeClaim": map[string]any{
			"claimName": spec.CheckpointClaim, "readOnly": true,
		}})
	}
	container := map[string]any{
		"name":  "vllm",
		"image": image,
		"args":  toAnySlice(args),
		"ports": []any{map[string]any{"name": "http", "containerPort": int64(port), "protocol": "TCP"}},
		"startupProbe": map[string]any{
			"httpGet":          health,
			"periodSeconds":    int64(startupPeriodSeconds),
			"failureThreshold": int64(startupFailureThreshold),
		},
		"readinessProbe": map[string]any{
			"httpGet":          health,
			"periodSeconds":    int64(5),
			"failureThreshold": int64(3),
		},
		// Once the startup probe passed: a server that stops answering is restarted.
		"livenessProbe": map[string]any{
			"httpGet":          health,
			"periodSeconds":    int64(livenessPeriodSeconds),
			"failureThreshold": int64(livenessFailureThreshold),
		},
		"securityContext": map[string]any{
			"allowPrivilegeEscalation": false,
			"capabilities":             map[string]any{"drop": []any{"ALL"}},
		},
		"volumeMounts": mounts,
	}
	setIf(container, "env", envList(env, spec.Env))
	setIf(container, "resources", resources)
	pod := map[string]any{
		"securityContext":              map[string]any{"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
		"containers":                   []any{container},
		"volumes":                      volumes,
		"serviceAccountName":           name,
		"automountServiceAccountToken": false,
	}
	spec.Scheduling.apply(pod)

	o := OwnerOf(obj)
	replicas := int32(1)
	if spec.Replicas != nil {
		replicas = *spec.Replicas
	}
	// Recreate: a replacement pod must not wait for GPUs that its predecessor holds.
	deploy := o.deployment(name, obj.GetNamespace(), "model-server", &replicas, "Recreate", pod)
	svc := o.object("v1", "Service", name, obj.GetNamespace(), "model-server", map[string]any{"spec": map[string]any{
		"selector": o.selector(),
		"ports": []any{map[string]any{
			"name": "http", "port": int64(port), "targetPort": "http", "protocol": "TCP",
		}},
	}})
	return []*unstructured.Unstructured{
		o.serviceAccount(name, obj.GetNamespace(), "model-server"),
		deploy, svc,
		o.checkpointPolicy(name, obj.GetNamespace(), port, spec),
	}, served, nil
}
