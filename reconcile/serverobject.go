package reconcile

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// serverObject is a kind whose object is kept in evalsid under its name: an online evaluation
// policy or a trace source. The engine puts the spec when the server's differs, and deletes it
// when the object goes.
type serverObject struct {
	what      string // "policy" or "trace source", for messages
	finalizer string
	// decode decodes and checks the object's spec (render.PolicySpec, render.TraceSourceSpec).
	decode func(*unstructured.Unstructured) (proto.Message, error)
	// get returns the server's spec and the status fields it reports; NotFound when absent.
	get func(ctx context.Context, e *Engine, project, name string) (proto.Message, map[string]any, error)
	// put stores spec and returns the status fields the server reports.
	put func(ctx context.Context, e *Engine, project, name string, spec proto.Message, creator string) (map[string]any, error)
	del func(ctx context.Context, e *Engine, project, name string) error
}

// reconcile makes the server hold obj's spec under obj's name in obj's project. A name that
// another project owns is Ready=False, reason Conflict, and nothing is overwritten.
func (so serverObject) reconcile(ctx context.Context, e *Engine, k *kind, obj *unstructured.Unstructured) (Outcome, error) {
	project, err := render.Project(obj, e.renderOptions())
	if err != nil {
		return e.projectNotAllowed(ctx, k, obj, err)
	}
	name := obj.GetName()
	fields := map[string]any{"project": project}
	failed := func(what string, err error) (Outcome, error) {
		cond, err := apiFailure(what, err)
		return Outcome{Status: &Status{Fields: fields, Conditions: []Condition{cond}}}, err
	}
	if obj.GetDeletionTimestamp() != nil {
		if !slices.Contains(obj.GetFinalizers(), so.finalizer) {
			return Outcome{}, nil
		}
		if held, err := e.stillHeld(ctx, k, obj, so.finalizer); err != nil || !held {
			return Outcome{}, err
		}
		// The server deletes only what this project owns; NotFound means there is nothing of
		// ours to delete (never created, already gone, or another project's name).
		if err := so.del(ctx, e, project, name); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			return failed("deleting the "+so.what+" before deletion", err)
		}
		return Outcome{}, e.setFinalizer(ctx, k, obj, so.finalizer, false)
	}
	spec, err := so.decode(obj)
	if err != nil {
		return Outcome{}, Terminal(evalsi.ReasonInvalidSpec, err)
	}
	if err := e.setFinalizer(ctx, k, obj, so.finalizer, true); err != nil {
		return Outcome{}, err
	}
	current, reported, err := so.get(ctx, e, project, name)
	switch {
	case err == nil && proto.Equal(current, spec):
		// The server holds the spec already: no write.
	case err == nil || connect.CodeOf(err) == connect.CodeNotFound:
		reported, err = so.put(ctx, e, project, name, spec, obj.GetAnnotations()[evalsi.AnnotationCreatedBy])
		if connect.CodeOf(err) == connect.CodeAlreadyExists {
			msg := fmt.Sprintf("the %s name %q is taken by another project; rename this object", so.what, name)
			return Outcome{Status: &Status{Fields: fields, Conditions: []Condition{Ready(false, evalsi.ReasonConflict, msg)}}},
				Terminalf(evalsi.ReasonConflict, "%s", msg)
		}
		if err != nil {
			return failed("putting the "+so.what, err)
		}
	default:
		return failed("reading the "+so.what, err)
	}
	return Outcome{Status: appliedStatus(so.what, project, reported)}, nil
}

// policies keeps OnlineEvalPolicies in MonitorService.
var policies = serverObject{
	what:      "policy",
	finalizer: evalsi.FinalizerDeletePolicy,
	decode:    func(obj *unstructured.Unstructured) (proto.Message, error) { return render.PolicySpec(obj) },
	get: func(ctx context.Context, e *Engine, project, name string) (proto.Message, map[string]any, error) {
		resp, err := e.api.Monitor.GetPolicy(ctx, connect.NewRequest(&v1.GetPolicyRequest{Project: project, Name: name}))
		if err != nil {
			return nil, nil, err
		}
		return resp.Msg.Policy.GetSpec(), nil, nil
	},
	put: func(ctx context.Context, e *Engine, project, name string, spec proto.Message, creator string) (map[string]any, error) {
		_, err := e.api.Monitor.PutPolicy(ctx, connect.NewRequest(&v1.PutPolicyRequest{
			Project: project, Name: name, Spec: spec.(*v1.PolicySpec), Creator: creator,
		}))
		return nil, err
	},
	del: func(ctx context.Context, e *Engine, project, name string) error {
		_, err := e.api.Monitor.DeletePolicy(ctx, connect.NewRequest(&v1.DeletePolicyRequest{Project: project, Name: name}))
		return err
	},
}

// traceSources keeps TraceSources in MonitorService; status carries the ingest endpoint.
var traceSources = serverObject{
	what:      "trace source",
	finalizer: evalsi.FinalizerDeleteTraceSource,
	decode:    func(obj *unstructured.Unstructured) (proto.Message, error) { return render.TraceSourceSpec(obj) },
	get: func(ctx context.Context, e *Engine, project, name string) (proto.Message, map[string]any, error) {
		resp, err := e.api.Monitor.GetTraceSource(ctx, connect.NewRequest(&v1.GetTraceSourceRequest{Project: project, Name: name}))
		if err != nil {
			return nil, nil, err
		}
		return resp.Msg.TraceSource.GetSpec(), traceSourceFields(resp.Msg.TraceSource), nil
	},
	put: func(ctx context.Context, e *Engine, project, name string, spec proto.Message, creator string) (map[string]any, error) {
		resp, err := e.api.Monitor.PutTraceSource(ctx, connect.NewRequest(&v1.PutTraceSourceRequest{
			Project: project, Name: name, Spec: spec.(*v1.TraceSourceSpec), Creator: creator,
		}))
		if err != nil {
			return nil, err
		}
		return traceSourceFields(resp.Msg.TraceSource), nil
	},
	del: func(ctx context.Context, e *Engine, project, name string) error {
		_, err := e.api.Monitor.DeleteTraceSource(ctx, connect.NewRequest(&v1.DeleteTraceSourceRequest{Project: project, Name: name}))
		return err
	},
}

func traceSourceFields(ts *v1.TraceSource) map[string]any {
	if ep := ts.GetIngestEndpoint(); ep != "" {
		return map[string]any{"ingestEndpoint": ep}
	}
	return nil
}
