package reconcile

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resources that the operator reads or writes.
var (
	DeploymentsGVR   = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	ServicesGVR      = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	ScaledObjectsGVR = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}
)

// evalsi returns the GVR of an evals.si resource.
func evalsi(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "evals.si", Version: "v1alpha1", Resource: resource}
}

// Resources of the evals.si kinds.
var (
	EvalRunsGVR           = evalsi("evalruns")
	OnlineEvalPoliciesGVR = evalsi("onlineevalpolicies")
	TraceSourcesGVR       = evalsi("tracesources")
	EvaluatorsGVR         = evalsi("evaluators")
	SandboxClassesGVR     = evalsi("sandboxclasses")
	CheckpointServersGVR  = evalsi("checkpointservers")
)

// childGVRs maps a child's kind (as render writes it) to its resource.
var childGVRs = map[string]schema.GroupVersionResource{
	"Deployment":   DeploymentsGVR,
	"Service":      ServicesGVR,
	"ScaledObject": ScaledObjectsGVR,
}
