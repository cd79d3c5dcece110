package render

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
)

// EvaluatorSpec is an Evaluator's spec: a pool of evaluation workers.
type EvaluatorSpec struct {
	Image              string       `json:"image,omitempty"`
	Args               []string     `json:"args,omitempty"`
	Replicas           *int32       `json:"replicas,omitempty"`
	Autoscaling        *Autoscaling `json:"autoscaling,omitempty"`
	Resources          Resources    `json:"resources,omitempty"`
	Env                []EnvVar     `json:"env,omitempty"`
	ServiceAccountName string       `json:"serviceAccountName,omitempty"`
	SandboxClass       string       `json:"sandboxClass,omitempty"`
	Egress             []EgressRule `json:"egress,omitempty"`
	Scheduling
}

// Pool is what the controller needs to know about a rendered pool besides its objects.
type Pool struct {
	// Deployment is the name of the pool's Deployment ("" for a pool without pods).
	Deployment string
	// Namespace is where the pool runs.
	Namespace string
	// Autoscaled says whether a ScaledObject owns the Deployment's replicas.
	Autoscaled bool
	// AutoscalingUnavailable says that autoscaling was asked for but KEDA is not served.
	AutoscalingUnavailable bool
	// Replicas is the fixed replica count when not autoscaled.
	Replicas int32
}

// check applies the Evaluator's rules across fields, the platform's limits, and Kubernetes' rules
// for what reaches its pods.
func (spec EvaluatorSpec) check(fixed []EnvVar, limits Limits) error {
	var ps problems
	checkReplicas(spec.Replicas, spec.Autoscaling, &ps)
	checkReplicaLimit(spec.Replicas, spec.Autoscaling, limits.MaxPoolReplicas, &ps)
	if slices.Contains(evalsi.PlatformServiceAccounts, spec.ServiceAccountName) {
		ps.add(specPointer.at("serviceAccountName"), "%s is one of the platform's own service accounts, which pools may not run as: name an account of the namespace labelled %s=true",
			spec.ServiceAccountName, evalsi.LabelPoolServiceAccount)
	}
	for i, a := range spec.Args {
		if a == "--pool" || strings.HasPrefix(a, "--pool=") {
			ps.add(specPointer.at("args").index(i), "--pool is set by the operator to the Evaluator's name")
		}
	}
	spec.Resources.check(specPointer.at("resources"), &ps)
	owned := fixedEnv(fixed)
	owned["EVALSI_SANDBOX_CLASS"] = "spec.sandboxClass"
	owned[APICAFileEnv] = "" // whether or not the platform names a CA
	owned[ClientCredentialsFileEnv] = ""
	checkEnv(specPointer.at("env"), spec.Env, owned, &ps)
	spec.Scheduling.check(specPointer, &ps)
	checkEgress(specPointer.at("egress"), spec.Egress, &ps)
	return ps.err()
}

// Evaluator renders an Evaluator into its Deployment and, when autoscaling is set and KEDA is
// served, its ScaledObject.
func Evaluator(obj *unstructured.Unstructured, opts Options) ([]*unstructured.Unstructured, Pool, error) {
	var spec EvaluatorSpec
	if err := opts.decodeSpec(obj, &spec); err != nil {
		return nil, Pool{}, err
	}
	project, err := Project(obj, opts)
	if err != nil {
		return nil, Pool{}, err
	}
	fixed := append([]EnvVar{
		{Name: "EVALSI_API_URL", Value: opts.APIURL},
		{Name: "EVALSI_PROJECT", Value: project},
		{Name: "EVALSI_EVALUATOR", Value: obj.GetName()},
		{Name: "EVALSI_SANDBOX_CLASS", Value: spec.SandboxClass},
		{Name: TokenFileEnv, Value: TokenFile},
	}, signInEnv(opts)...)
	if err := spec.check(fixed, opts.Limits); err != nil {
		return nil, Pool{}, err
	}
	o := OwnerOf(obj)
	name := obj.GetName() + "-evaluator"
	pool := Pool{Deployment: name, Namespace: obj.GetNamespace()}
	image, err := platformImage(spec.Image, opts)
	if err != nil {
		return nil, pool, err
	}
	tmp, tmpMount := tmpVolume()
	container := map[string]any{
		"name":            "evaluator",
		"image":           image,
		"command":         []any{EvaluatorCommand},
		"args":            toAnySlice(append([]string{"--pool=" + obj.GetName()}, spec.Args...)),
		"securityContext": restrictedContainer(),
		"volumeMounts":    []any{tmpMount},
		"env":             envList(fixed, spec.Env),
	}
	setIf(container, "resources", spec.Resources.render())
	pod := map[string]any{
		"securityContext": restrictedPod(),
		"containers":      []any{container},
		"volumes":         []any{tmp},
	}
	sa := spec.ServiceAccountName
	if sa == "" {
		sa = name
	}
	signIn(pod, container, sa, opts)
	spec.Scheduling.apply(pod)

	// The pool evaluates its namespace's CheckpointServers, whose own policies admit it on their
	// port only.
	egress := append([]EgressRule{checkpointServersEgress}, spec.Egress...)
	objs := o.pool(&pool, "evaluator", spec.Replicas, spec.Autoscaling, opts,
		queueURL(opts.APIURL, project, obj.GetNamespace(), evalsiv1.PoolKind_POOL_KIND_EVALUATOR, obj.GetName()), sa, spec.ServiceAccountName == "", pod, egress)
	return objs, pool, nil
}
