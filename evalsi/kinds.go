package evalsi

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// APIKind is one kind of the evals.si API as every list of the kinds reads it: the schemas, the
// renderer's dispatch, the webhook's rules, the operator's controllers, make dev's table, and the
// test that keeps the engine neutral. The charts' templates range over
// files/kinds.yaml, which `make golden` writes from Kinds (chart/TestGoldenKindsFiles).
type APIKind struct {
	// Kind is the kind's name, as objects and owner references spell it.
	Kind string
	// Resource is its resource.
	Resource schema.GroupVersionResource
	// Namespaced is false for a cluster-scoped kind.
	Namespaced bool
	// Controller is the name --controllers selects its controller by.
	Controller string
	// Workload is whether the operator renders it into Kubernetes objects (a pool of pods), which
	// the webhook can dry-run; the others are kept in evalsid.
	Workload bool
	// SpecMessage, of a kind kept in evalsid, is the proto message (evalsi.v1) whose JSON form is
	// its spec, which describes its fields in the CRD (internal/crdschema).
	SpecMessage string
}

// The evals.si kinds.
var (
	EvaluatorKind        = APIKind{Kind: "Evaluator", Resource: Evaluators, Namespaced: true, Controller: "evaluator", Workload: true}
	SandboxClassKind     = APIKind{Kind: "SandboxClass", Resource: SandboxClasses, Controller: "sandboxclass", Workload: true}
	CheckpointServerKind = APIKind{Kind: "CheckpointServer", Resource: CheckpointServers, Namespaced: true, Controller: "checkpointserver", Workload: true}
	EvalRunKind          = APIKind{Kind: "EvalRun", Resource: EvalRuns, Namespaced: true, Controller: "evalrun", SpecMessage: "RunSpec"}
	OnlineEvalPolicyKind = APIKind{Kind: "OnlineEvalPolicy", Resource: OnlineEvalPolicies, Namespaced: true, Controller: "onlineevalpolicy", SpecMessage: "PolicySpec"}
	TraceSourceKind      = APIKind{Kind: "TraceSource", Resource: TraceSources, Namespaced: true, Controller: "tracesource", SpecMessage: "TraceSourceSpec"}
)

// Kinds are the kinds of the evals.si API, in the order the operator runs their controllers: the
// workload kinds first.
var Kinds = []APIKind{EvaluatorKind, SandboxClassKind, CheckpointServerKind, EvalRunKind, OnlineEvalPolicyKind, TraceSourceKind}

// KindNamed returns the evals.si kind named kind, and whether there is one.
func KindNamed(kind string) (APIKind, bool) {
	for _, k := range Kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return APIKind{}, false
}

// SchemaFile is the name of the JSON schema file of the kind's spec (package schemas).
func (k APIKind) SchemaFile() string { return strings.ToLower(k.Kind) + ".json" }

// Resources returns the resource names of kinds.
func Resources(kinds []APIKind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.Resource.Resource
	}
	return out
}
