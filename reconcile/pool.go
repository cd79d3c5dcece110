package reconcile

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// renderOptions are the engine's rendering options with autoscaling set from discovery and the
// project bindings last read.
func (e *Engine) renderOptions() render.Options {
	opts := e.cfg.Render
	opts.Autoscaling = e.isServed(evalsi.ScaledObjects)
	opts.ProjectBindings = e.projectBindings()
	return opts
}

// renderChildren renders obj and makes its children what the rendering says. A spec that does
// not render is terminal (InvalidSpec).
func (e *Engine) renderChildren(ctx context.Context, k *kind, obj *unstructured.Unstructured) (render.Result, children, error) {
	res, err := render.Object(obj, e.renderOptions())
	if err != nil {
		return res, nil, Terminal(evalsi.ReasonInvalidSpec, err)
	}
	live, err := e.syncChildren(ctx, k, obj, res.Objects)
	return res, live, err
}

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
	pool := res.Pool
	fields := map[string]any{}
	sandbox := obj.GetKind() == "SandboxClass"
	if sandbox {
		fields["namespace"] = pool.Namespace
	}
	if pool.Deployment == "" {
		return Outcome{Status: &Status{Fields: fields, Conditions: []Condition{
			Ready(true, evalsi.ReasonNoPool, "trials run in a pod of their own; the pod rung has no pool"),
		}}}, nil
	}
	if !sandbox {
		switch {
		case pool.Autoscaled:
			fields["autoscaling"] = "KEDA"
		case pool.AutoscalingUnavailable:
			fields["autoscaling"] = "Unavailable"
		default:
			fields["autoscaling"] = "Fixed"
		}
	}
	deploy := live.get("Deployment", pool.Namespace, pool.Deployment)
	r := rolloutOf(deploy)
	fields["replicas"] = r.replicas
	fields["readyReplicas"] = r.ready
	var ready Condition
	switch {
	case !r.done:
		ready = Ready(false, evalsi.ReasonRollingOut, r.message)
	case pool.AutoscalingUnavailable:
		ready = Ready(true, evalsi.ReasonAutoscalingUnavailable, fmt.Sprintf(
			"autoscaling is set but KEDA's ScaledObject is not served in this cluster: running %d fixed replicas", pool.Replicas))
	default:
		ready = Ready(true, evalsi.ReasonAvailable, "the pool's current spec is rolled out")
	}
	return Outcome{Status: &Status{Fields: fields, Conditions: []Condition{ready}}}, nil
}
