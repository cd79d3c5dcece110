package reconcile

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// renderOptions are the engine's rendering options with autoscaling set from discovery and the
// project bindings last read.
func (e *Engine) renderOptions() render.Options {
	opts := e.cfg.Render
	opts.Autoscaling = e.isServed(evalsi.ScaledObjects) && e.isServed(evalsi.TriggerAuthentications)
	opts.Limits = e.limits()
	return opts
}

// limits are the platform's limits of the operator's configuration, with the project bindings
// last read.
func (e *Engine) limits() render.Limits {
	l := e.cfg.Render.Limits
	l.ProjectBindings = e.projectBindings()
	return l
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
