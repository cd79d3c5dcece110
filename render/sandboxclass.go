package render

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"evals.si/operator/apiclient/evalsiv1"
)

// Sandbox rungs: how strongly a trial is isolated.
const (
	RungPod        = "pod"
	RungBubblewrap = "bubblewrap"
	RungLandlock   = "landlock"
)

// SandboxClassSpec is a SandboxClass's spec: a pool of sandboxes that trials run in.
type SandboxClassSpec struct {
	Rung             string       `json:"rung"`
	Image            string       `json:"image,omitempty"`
	UserNamespaces   bool         `json:"userNamespaces,omitempty"`
	RuntimeClassName string       `json:"runtimeClassName,omitempty"`
	Replicas         *int32       `json:"replicas,omitempty"`
	Autoscaling      *Autoscaling `json:"autoscaling,omitempty"`
	Resources        Resources    `json:"resources,omitempty"`
	// AllowedNamespaces selects, by their labels, the namespaces whose Evaluators and EvalRuns may
	// use the class; absent, none may ({} selects every namespace). Select by a label only the
	// platform can set.
	AllowedNamespaces *metav1.LabelSelector `json:"allowedNamespaces,omitempty"`
	// Egress opens more than cluster DNS and evalsid to the pool's sandboxes (NetworkPolicy egress
	// rules): by default the code a trial runs reaches nothing else.
	Egress []EgressRule `json:"egress,omitempty"`
	// TrialImages are the images the pod rung's trials may run (the first is the trial shape's);
	// the API server refuses a trial pod of any other.
	TrialImages []string `json:"trialImages,omitempty"`
	Scheduling
}

// check applies the SandboxClass's rules across fields and Kubernetes' rules for what reaches
// its pods.
func (spec SandboxClassSpec) check() error {
	var ps problems
	if sel := spec.AllowedNamespaces; sel != nil {
		checkLabelSelector(specPointer.at("allowedNamespaces"), sel, &ps)
	}
	checkEgress(specPointer.at("egress"), spec.Egress, &ps)
	switch {
	case spec.Rung == RungPod && len(spec.TrialImages) == 0:
		ps.add(specPointer.at("trialImages"), "the pod rung runs each trial in a pod of one of these images: name at least one")
	case spec.Rung != RungPod && len(spec.TrialImages) > 0:
		ps.add(specPointer.at("trialImages"), "only the pod rung runs trials in images of their own: this class runs them in its pool")
	}
	checkReplicas(spec.Replicas, spec.Autoscaling, &ps)
	spec.Resources.check(specPointer.at("resources"), &ps)
	spec.Scheduling.check(specPointer, &ps)
	return ps.err()
}

// SandboxClass renders a SandboxClass's pool into the sandbox namespace. The `pod` rung's pool is
// its launcher, which makes a pod of its own for each trial from the trial shape rendered beside
// it (trialpod.go).
func SandboxClass(obj *unstructured.Unstructured, opts Options) ([]*unstructured.Unstructured, Pool, error) {
	var spec SandboxClassSpec
	if err := opts.decodeSpec(obj, &spec); err != nil {
		return nil, Pool{}, err
	}
	if err := spec.check(); err != nil {
		return nil, Pool{}, err
	}
	pool := Pool{Namespace: opts.SandboxNamespace}
	if opts.SandboxNamespace == "" {
		return nil, pool, fmt.Errorf("the operator has no --sandbox-namespace to run SandboxClass pools in")
	}
	image, err := platformImage(spec.Image, opts)
	if err != nil {
		return nil, pool, err
	}
	o := OwnerOf(obj)
	name := "sandbox-" + obj.GetName()
	pool.Deployment = name

	podSecurity, containerSecurity := sandboxSecurity(spec)
	container := map[string]any{
		"name":            "sandboxd",
		"image":           image,
		"command":         []any{SandboxdCommand},
		"args":            toAnySlice(sandboxdArgs(spec, obj.GetName(), name)),
		"securityContext": containerSecurity,
		"env": envList(append([]EnvVar{
			{Name: "EVALSI_API_URL", Value: opts.APIURL},
			{Name: "EVALSI_SANDBOX_CLASS", Value: obj.GetName()},
			{Name: TokenFileEnv, Value: TokenFile},
		}, signInEnv(opts)...), nil),
	}
	if spec.Rung != RungPod { // the pod rung's resources are its trials'
		setIf(container, "resources", spec.Resources.render())
	}
	_, probeSecurity := sandboxSecurity(spec)
	probe := probeContainer(image, probeArgs(spec), probeSecurity)
	pod := map[string]any{
		"securityContext": podSecurity,
		"initContainers":  []any{probe},
		"containers":      []any{container},
	}
	if spec.Rung == RungLandlock || spec.Rung == RungPod {
		tmp, mount := tmpVolume()
		pod["volumes"] = []any{tmp}
		container["volumeMounts"] = []any{mount}
		probe["volumeMounts"] = []any{mount}
	}
	if spec.UserNamespaces {
		pod["hostUsers"] = false
	}
	setIf(pod, "runtimeClassName", spec.RuntimeClassName)
	signIn(pod, container, name, opts)
	spec.Scheduling.apply(pod)
	component := "sandbox"
	if spec.Rung == RungPod {
		// The launcher makes the trial pods through the API server with its own token.
		component = "launcher"
		pod["automountServiceAccountToken"] = true
	}

	objs := o.pool(&pool, component, spec.Replicas, spec.Autoscaling, opts,
		queueURL(opts.APIURL, "", "", evalsiv1.PoolKind_POOL_KIND_SANDBOX, obj.GetName()), name, true, pod, spec.Egress)
	if spec.Rung == RungPod {
		objs = append(objs, o.launcherAccess(name, opts.SandboxNamespace, opts.KubernetesAPICIDRs)...)
		objs = append(objs, o.trialShape(name, opts.SandboxNamespace, image, spec)...)
	}
	return objs, pool, nil
}

// sandboxdArgs are the arguments of a class's pool (sandboxd, running as the account name): its
// rung and class, and for the pod rung the trial shape its launcher makes trial pods from.
func sandboxdArgs(spec SandboxClassSpec, class, name string) []string {
	args := []string{"--rung=" + spec.Rung, "--class=" + class}
	if spec.Rung == RungPod {
		args = append(args, "--trial-template="+name+"-trial")
	}
	return args
}

// IsolationProbeContainer is the init container of every sandbox pool pod that runs
// `evalsi-operator probe` under the pool's own security context: it fails the pod when the
// class's floor is not met, and its termination message says what confines the pod
// (isolation.Result), which the operator reads into the class's status.
const IsolationProbeContainer = "isolation-probe"

// probeContainer is the isolation probe's init container: image's evalsi-operator probe with
// args, under security (the confinement it reports on), its result in its termination message.
func probeContainer(image string, args []string, security map[string]any) map[string]any {
	return map[string]any{
		"name":                     IsolationProbeContainer,
		"image":                    image,
		"command":                  []any{OperatorCommand, "probe"},
		"args":                     toAnySlice(args),
		"securityContext":          security,
		"terminationMessagePolicy": "File",
	}
}

// probeArgs are the probe's arguments for a class: its rung and whether its pods run in user
// namespaces. The probe's own defaults name the metadata address that must not answer.
func probeArgs(spec SandboxClassSpec) []string {
	args := []string{"--rung=" + spec.Rung}
	if spec.UserNamespaces {
		args = append(args, "--user-namespaces")
	}
	return args
}

// sandboxSecurity returns the pod and container security contexts of a rung:
//   - landlock confines trials with the kernel's Landlock LSM from an unprivileged process, so the
//     pool passes Pod Security `restricted`;
//   - bubblewrap with user namespaces (hostUsers: false) creates its namespaces with capabilities
//     that exist only inside the pod's user namespace: unprivileged, no escalation, but seccomp
//     and /proc masking must allow nested namespaces;
//   - bubblewrap without user namespaces needs a privileged container, which the sandbox
//     namespace (and only it) admits.
func sandboxSecurity(spec SandboxClassSpec) (pod, container map[string]any) {
	switch {
	case spec.Rung == RungLandlock, spec.Rung == RungPod:
		// The pod rung's pool is its launcher, which runs no trial: a restricted pod, as are
		// the trial pods it makes.
		return restrictedPod(), restrictedContainer()
	case spec.UserNamespaces:
		return map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}},
			map[string]any{
				"privileged":               false,
				"allowPrivilegeEscalation": false,
				"procMount":                "Unmasked",
				"capabilities": map[string]any{
					"drop": []any{"ALL"},
					"add":  []any{"SETUID", "SETGID", "SYS_ADMIN", "SYS_CHROOT"},
				},
			}
	default:
		return map[string]any{}, map[string]any{"privileged": true}
	}
}

// NamespaceMayUse reports whether a namespace with the given labels may use class, a SandboxClass:
// its spec.allowedNamespaces selects the namespace. A class without one admits no namespace (it
// fails closed: a class written in a hurry opens nothing); {} admits every namespace.
func NamespaceMayUse(class *unstructured.Unstructured, namespaceLabels map[string]string) (bool, error) {
	var spec SandboxClassSpec
	if err := decodeSpec(class, &spec); err != nil {
		return false, err
	}
	if spec.AllowedNamespaces == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(spec.AllowedNamespaces)
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(namespaceLabels)), nil
}
