package reconcile

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// reconcilePool reconciles an Evaluator or a SandboxClass: render its pool, sync the children and
// report the Deployment's rollout.
func reconcilePool(ctx context.Context, e *Engine, k *kind, obj *unstructured.Unstructured) (Outcome, error) {
	refused := e.sandboxClassRefusal(ctx, obj.GetNamespace(), sandboxClassOf(obj))
	if refused == nil {
		refused = e.serviceAccountRefusal(ctx, obj)
	}
	if refused != nil {
		// Nothing that uses the class or the account runs: the pool's children go (or are
		// never made).
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

// serviceAccountRefusal returns the Ready condition of an Evaluator whose spec names a service
// account not opened to pools (accountRefusal), or nil. Admission refuses such an Evaluator; this
// holds where admission did not run, and when the account's label is removed later.
func (e *Engine) serviceAccountRefusal(ctx context.Context, obj *unstructured.Unstructured) *Condition {
	name, _, _ := unstructured.NestedString(obj.Object, "spec", "serviceAccountName")
	if name == "" {
		return nil
	}
	sa, err := e.kube.CoreV1().ServiceAccounts(obj.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	return accountRefusal(obj.GetNamespace(), name, sa, err)
}
