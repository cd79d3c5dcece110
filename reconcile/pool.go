package reconcile

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// reconcilePool reconciles an Evaluator or a SandboxClass: render its pool, sync the children and
// report the Deployment's rollout.
func reconcilePool(ctx context.Context, e *Engine, k *kind, obj *unstructured.Unstructured) (Outcome, error) {
	if refused := e.sandboxClassRefusal(ctx, obj.GetNamespace(), sandboxClassOf(obj)); refused != nil {
		// Nothing that uses the class runs: the pool's children go (or are never made).
		if _, err := e.syncChildren(ctx, k, obj, nil); err != nil {
			return Outcome{}, err
		}
		return Outcome{Status: &Status{Fields: statusFields(obj), Conditions: []Condition{*refused}}, RequeueAfter: classRecheck}, nil
	}
	res, live, err := e.renderChildren(ctx, k, obj)
	if err != nil {
		return Outcome{}, err
	}
	deploy := live.get("Deployment", res.Pool.Namespace, res.Pool.Deployment)
	return Outcome{Status: poolStatus(res.Pool, obj.GetKind() == "SandboxClass", deploy)}, nil
}
