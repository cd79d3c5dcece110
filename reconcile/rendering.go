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
