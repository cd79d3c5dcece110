package reconcile

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/evalsi"
)

// kind is one evals.si kind as the engine runs it.
type kind struct {
	// controller is the name --controllers selects it by.
	controller string
	// name is the Kind.
	name       string
	gvr        schema.GroupVersionResource
	namespaced bool
	// children are the resources of its children, watched by the managed-by label.
	children []schema.GroupVersionResource
	// api says that the kind is reconciled through evalsid and needs its client.
	api bool
	// finalizer is the finalizer the kind's reconcile puts on objects ("" for none).
	finalizer string
	// sandboxChildren says that children live in the sandbox namespace, not the owner's.
	sandboxChildren bool
	// reconcile makes the world match one object and returns its status.
	reconcile func(ctx context.Context, e *Engine, k *kind, obj *unstructured.Unstructured) (Outcome, error)
}

// childNamespace is where the informers of k's children watch: the sandbox namespace for
// SandboxClass pools, else the engine's namespace ("" for all).
func (k *kind) childNamespace(cfg Config) string {
	if k.sandboxChildren {
		return cfg.Render.SandboxNamespace
	}
	return cfg.Namespace
}

// poolChildren are the resources of an Evaluator's or a SandboxClass's children.
var poolChildren = []schema.GroupVersionResource{evalsi.ServiceAccounts, evalsi.Deployments, evalsi.ScaledObjects, evalsi.TriggerAuthentications, evalsi.NetworkPolicies}

// kinds are every controller the engine can run, in a fixed order.
var kinds = []*kind{
	{
		controller: "evaluator", name: "Evaluator", gvr: evalsi.Evaluators, namespaced: true,
		children:  poolChildren,
		reconcile: reconcilePool,
	},
	{
		controller: "sandboxclass", name: "SandboxClass", gvr: evalsi.SandboxClasses,
		children:        poolChildren,
		sandboxChildren: true,
		reconcile:       reconcilePool,
	},
	{
		controller: "checkpointserver", name: "CheckpointServer", gvr: evalsi.CheckpointServers, namespaced: true,
		children:  []schema.GroupVersionResource{evalsi.Deployments, evalsi.Services},
		reconcile: reconcileCheckpointServer,
	},
	{
		controller: "evalrun", name: "EvalRun", gvr: evalsi.EvalRuns, namespaced: true, api: true, finalizer: evalsi.FinalizerCancelRun,
		reconcile: reconcileEvalRun,
	},
	{
		controller: "onlineevalpolicy", name: "OnlineEvalPolicy", gvr: evalsi.OnlineEvalPolicies, namespaced: true, api: true, finalizer: evalsi.FinalizerDeletePolicy,
		reconcile: func(ctx context.Context, e *Engine, k *kind, obj *unstructured.Unstructured) (Outcome, error) {
			return policies.reconcile(ctx, e, k, obj)
		},
	},
	{
		controller: "tracesource", name: "TraceSource", gvr: evalsi.TraceSources, namespaced: true, api: true, finalizer: evalsi.FinalizerDeleteTraceSource,
		reconcile: func(ctx context.Context, e *Engine, k *kind, obj *unstructured.Unstructured) (Outcome, error) {
			return traceSources.reconcile(ctx, e, k, obj)
		},
	},
}

// ControllerNames lists the controllers that --controllers accepts.
func ControllerNames() []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.controller)
	}
	return out
}

func kindByController(name string) *kind {
	for _, k := range kinds {
		if k.controller == name {
			return k
		}
	}
	return nil
}

func kindByName(name string) *kind {
	for _, k := range kinds {
		if k.name == name {
			return k
		}
	}
	return nil
}
