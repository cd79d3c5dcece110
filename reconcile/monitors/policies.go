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

// OnlineEvalPolicies is the OnlineEvalPolicy kind, kept in MonitorService through api. Policy names are
// global on the server: a name another project holds, or another object of the project, is a
// Conflict.
func OnlineEvalPolicies(api *apiclient.Client) *engine.Kind {
	so := serverObject{
		what:   "policy",
		decode: func(obj *unstructured.Unstructured) (proto.Message, error) { return render.PolicySpec(obj) },
		get: func(ctx context.Context, project, name string) (proto.Message, string, map[string]any, error) {
			resp, err := api.Monitor.GetPolicy(ctx, connect.NewRequest(&v1.GetPolicyRequest{Project: project, Name: name}))
			if err != nil {
				return nil, "", nil, err
			}
			return resp.Msg.Policy.GetSpec(), resp.Msg.Policy.GetOwner(), nil, nil
		},
		put: func(ctx context.Context, project, name, owner string, spec proto.Message, creator string) (map[string]any, error) {
			_, err := api.Monitor.PutPolicy(ctx, connect.NewRequest(&v1.PutPolicyRequest{
				Project: project, Name: name, Spec: spec.(*v1.PolicySpec), Creator: creator, Owner: owner,
			}))
			return nil, err
		},
		del: func(ctx context.Context, project, name, owner string) error {
			_, err := api.Monitor.DeletePolicy(ctx, connect.NewRequest(&v1.DeletePolicyRequest{Project: project, Name: name, Owner: owner}))
			return err
		},
	}
	return so.kind(evalsi.OnlineEvalPolicyKind, evalsi.FinalizerDeletePolicy, api)
}
