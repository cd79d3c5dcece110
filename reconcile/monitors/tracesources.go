package monitors

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/apiclient"
	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
)

// TraceSources is the TraceSource kind, kept in MonitorService through api; its status carries
// the ingest endpoint the server gives.
func TraceSources(api *apiclient.Client) *engine.Kind {
	so := serverObject{
		what:   "trace source",
		decode: func(obj *unstructured.Unstructured) (proto.Message, error) { return render.TraceSourceSpec(obj) },
		get: func(ctx context.Context, project, name string) (proto.Message, string, map[string]any, error) {
			resp, err := api.Monitor.GetTraceSource(ctx, connect.NewRequest(&v1.GetTraceSourceRequest{Project: project, Name: name}))
			if err != nil {
				return nil, "", nil, err
			}
			return resp.Msg.TraceSource.GetSpec(), resp.Msg.TraceSource.GetOwner(), traceSourceFields(resp.Msg.TraceSource), nil
		},
		put: func(ctx context.Context, project, name, owner string, spec proto.Message, creator string) (map[string]any, error) {
			resp, err := api.Monitor.PutTraceSource(ctx, connect.NewRequest(&v1.PutTraceSourceRequest{
				Project: project, Name: name, Spec: spec.(*v1.TraceSourceSpec), Creator: creator, Owner: owner,
			}))
			if err != nil {
				return nil, err
			}
			return traceSourceFields(resp.Msg.TraceSource), nil
		},
		del: func(ctx context.Context, project, name, owner string) error {
			_, err := api.Monitor.DeleteTraceSource(ctx, connect.NewRequest(&v1.DeleteTraceSourceRequest{Project: project, Name: name, Owner: owner}))
			return err
		},
	}
	return so.kind(evalsi.TraceSourceKind, evalsi.FinalizerDeleteTraceSource, api)
}

// traceSourceFields are the status fields of what the server holds: its ingest endpoint, removed
// from the status when the server gives none.
func traceSourceFields(ts *v1.TraceSource) map[string]any {
	if ep := ts.GetIngestEndpoint(); ep != "" {
		return map[string]any{"ingestEndpoint": ep}
	}
	return map[string]any{"ingestEndpoint": nil}
}
