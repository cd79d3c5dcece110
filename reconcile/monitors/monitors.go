// Package monitors is the OnlineEvalPolicy and TraceSource kinds: objects kept in evalsid's
// MonitorService under their name, put when the server's spec differs and deleted with the
// object. Each is an engine.External run by the engine's Managed lifecycle.
package monitors

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/apiclient"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/apicall"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
)

// serverObject is one kind kept in MonitorService: how its spec is decoded and how the server
// reads, puts and deletes it.
type serverObject struct {
	what string // "policy" or "trace source", for messages
	// decode decodes and checks the object's spec (render.PolicySpec, render.TraceSourceSpec).
	decode func(*unstructured.Unstructured) (proto.Message, error)
	// get returns the server's spec, its owner and the status fields it reports; NotFound when
	// absent.
	get func(ctx context.Context, project, name string) (spec proto.Message, owner string, reported map[string]any, err error)
	// put stores spec for owner and returns the status fields the server reports.
	put func(ctx context.Context, project, name, owner string, spec proto.Message, creator string) (map[string]any, error)
	// del deletes what owner holds of the name.
	del func(ctx context.Context, project, name, owner string) error
}

// ownerOf is how the server knows the object that declares a policy or trace source: its
// namespace and name (monitor.proto, "An owner"). Not its UID, which a restore from a backup
// changes: the restored object takes back what it held.
func ownerOf(obj *unstructured.Unstructured) string {
	return obj.GetNamespace() + "/" + obj.GetName()
}

// conflict is the failure of an object whose name the server holds for another project or
// another object (held says which): Ready=False, reason Conflict, and nothing is overwritten.
func (so serverObject) conflict(held string) error {
	msg := fmt.Sprintf("%s; rename this object", held)
	return &engine.Failed{Status: engine.NotReady(evalsi.ReasonConflict, msg), Err: engine.Terminalf(evalsi.ReasonConflict, "%s", msg)}
}

// kind returns the engine Kind of so.
func (so serverObject) kind(api evalsi.APIKind, finalizer string, client *apiclient.Client) *engine.Kind {
	k := engine.NewKind(api)
	k.Finalizer = finalizer
	k.Validate = func(obj *unstructured.Unstructured) error { return render.Validate(obj, render.Limits{}) }
	k.Reconciler = engine.Managed(finalizer, so)
	k.Off = apiOff(client)
	return k
}

// apiOff keeps the kinds kept in evalsid off without a client of it.
func apiOff(api *apiclient.Client) func() string {
	return func() string {
		if api == nil {
			return "no evalsid URL (--api-url)"
		}
		return ""
	}
}

// Observe reads the server's object: it exists when the project holds one of the name, and is up
// to date when its spec is the object's and this object holds it. One that another object of the
// project holds is a Conflict, left as it is.
func (so serverObject) Observe(ctx context.Context, r *engine.Request) (engine.Observation, error) {
	spec, err := so.decode(r.Object)
	if err != nil {
		return engine.Observation{}, engine.Terminal(evalsi.ReasonInvalidSpec, err)
	}
	name, owner := r.Object.GetName(), ownerOf(r.Object)
	current, held, reported, err := so.get(ctx, r.Project, name)
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound:
		return engine.Observation{}, nil
	case err != nil:
		return engine.Observation{}, apicall.Failure("reading the "+so.what, err)
	case held != "" && held != owner:
		return engine.Observation{}, so.conflict(fmt.Sprintf("the %s name %q is held in project %s by %s", so.what, name, r.Project, held))
	}
	return engine.Observation{Exists: true, UpToDate: held == owner && proto.Equal(current, spec), Status: appliedStatus(so.what, r.Project, reported)}, nil
}

// Create puts the object's spec under its name. A name that another project holds is
// Ready=False, reason Conflict, and nothing is overwritten.
func (so serverObject) Create(ctx context.Context, r *engine.Request) (engine.Observation, error) {
	spec, err := so.decode(r.Object)
	if err != nil {
		return engine.Observation{}, engine.Terminal(evalsi.ReasonInvalidSpec, err)
	}
	reported, err := so.put(ctx, r.Project, r.Object.GetName(), ownerOf(r.Object), spec, r.Object.GetAnnotations()[evalsi.AnnotationCreatedBy])
	var held *connect.Error
	if errors.As(err, &held) && held.Code() == connect.CodeAlreadyExists {
		return engine.Observation{}, so.conflict(held.Message())
	}
	if err != nil {
		return engine.Observation{}, apicall.Failure("putting the "+so.what, err)
	}
	return engine.Observation{Exists: true, UpToDate: true, Status: appliedStatus(so.what, r.Project, reported)}, nil
}

// Update puts the spec again: drift made through the CLI is corrected.
func (so serverObject) Update(ctx context.Context, r *engine.Request) (engine.Observation, error) {
	return so.Create(ctx, r)
}

// Delete deletes the server's object of the name. The server deletes only what this project and
// this object hold; NotFound means there is nothing of ours to delete (never created, already
// gone, another project's name, or another object's).
func (so serverObject) Delete(ctx context.Context, r *engine.Request) error {
	if err := so.del(ctx, r.Project, r.Object.GetName(), ownerOf(r.Object)); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		return apicall.Failure("deleting the "+so.what+" before deletion", err)
	}
	return nil
}

// appliedStatus is the status of a policy or trace source (what) that the server holds in
// project, with the fields the server reported.
func appliedStatus(what, project string, reported map[string]any) *engine.Status {
	fields := map[string]any{"project": project}
	for k, v := range reported {
		fields[k] = v
	}
	return &engine.Status{Fields: fields, Conditions: []engine.Condition{
		engine.Ready(true, evalsi.ReasonApplied, fmt.Sprintf("the %s is applied in project %s", what, project)),
	}}
}
