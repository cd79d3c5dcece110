package reconcile

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
)

// reconcileCheckpointServer renders the vLLM Deployment and Service, syncs them, and reports the
// endpoint. Ready is true only once the current spec is rolled out and one of its replicas
// passes /health, so a spec change is not Ready on the old revision's replica.
func reconcileCheckpointServer(ctx context.Context, e *Engine, k *kind, obj *unstructured.Unstructured) (Outcome, error) {
	res, live, err := e.renderChildren(ctx, k, obj)
	if err != nil {
		return Outcome{}, err
	}
	r := rolloutOf(live.get("Deployment", obj.GetNamespace(), res.Served.Deployment))
	fields := map[string]any{
		"endpoint":        res.Served.Endpoint,
		"servedModelName": res.Served.ModelName,
		"readyReplicas":   r.ready,
	}
	var ready Condition
	switch {
	case !r.done:
		ready = Ready(false, evalsi.ReasonRollingOut, r.message)
	case r.ready == 0:
		ready = Ready(false, evalsi.ReasonNoReplicas, "no replica of the current spec is serving")
	default:
		ready = Ready(true, evalsi.ReasonServing, "a replica of the current spec passes /health")
	}
	return Outcome{Status: &Status{Fields: fields, Conditions: []Condition{ready}}}, nil
}
