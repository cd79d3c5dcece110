package reconcile

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// reconcileCheckpointServer renders the vLLM Deployment and Service, syncs them, and reports the
// endpoint. Ready is true only once the current spec is rolled out and one of its replicas
// passes /health, so a spec change is not Ready on the old revision's replica.
func reconcileCheckpointServer(ctx context.Context, e *Engine, k *kind, obj *unstructured.Unstructured) (Outcome, error) {
	res, live, err := e.renderChildren(ctx, k, obj)
	if err != nil {
		return Outcome{}, err
	}
	deploy := live.get("Deployment", obj.GetNamespace(), res.Served.Deployment)
	return Outcome{Status: checkpointServerStatus(res.Served, deploy)}, nil
}
