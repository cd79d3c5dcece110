// Package runs is the EvalRun kind: a run in evalsid's RunService, created once per object
// (idempotency key: the object's uid), followed until it ends, and cancelled when the object is
// deleted before it ended. It is an engine.External run by the engine's Managed lifecycle; the
// run follower (follower.go) reads the running runs in batches.
package runs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"

	"evals.si/operator/apiclient"
	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/apicall"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
)

// Options configure the EvalRun kind.
type Options struct {
	// PollInterval is how often the running runs are read (with jitter); 10s when zero.
	PollInterval time.Duration
	// TTL is how long a finished EvalRun stays before it is deleted, unless its
	// evals.si/ttl-after-finished annotation says otherwise; 0 keeps it (ttl.go).
	TTL time.Duration
	// ClassRefusal returns the Ready condition of an object in namespace that may not use the
	// SandboxClass class, or nil when it may (the workload kinds' check).
	ClassRefusal func(ctx context.Context, c *engine.Controller, namespace, class string) *engine.Condition
	// ClassRecheck is how often a run waiting on its SandboxClass looks again; a change of its
	// namespace's labels reconciles it at once, and so does a change of the class where this
	// operator runs the SandboxClass controller (waitsOn).
	ClassRecheck time.Duration
	// Clock is the time the runs are read and expire at (clock.RealClock when nil).
	Clock clock.PassiveClock
	// Follower, when set, is the process's, shared by the engines of its shards; else the kind
	// has one of its own.
	Follower *Follower
}

// targetRecheck is how often a run waiting on its CheckpointServer looks again.
const targetRecheck = 2 * time.Second

// EvalRuns is the EvalRun kind, reconciled through api.
func EvalRuns(api *apiclient.Client, opts Options) *engine.Kind {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Follower == nil {
		opts.Follower = NewFollower()
	}
	r := &evalRuns{api: api, opts: opts, follower: opts.Follower}
	k := engine.NewKind(evalsi.EvalRunKind)
	k.Finalizer = evalsi.FinalizerCancelRun
	k.Validate = func(obj *unstructured.Unstructured) error { return render.Validate(obj, render.Limits{}) }
	k.Reconciler = engine.Managed(evalsi.FinalizerCancelRun, r)
	k.Run, k.Followed, k.Refers = r.follow, running, waitsOn
	k.Off = func() string {
		if api == nil {
			return "no evalsid URL (--api-url)"
		}
		return ""
	}
	return k
}

// waitsOn is what an EvalRun without a run yet waits on: its SandboxClass and its target
// CheckpointServer. One with a run waits on nothing more.
func waitsOn(obj *unstructured.Unstructured) []engine.Ref {
	if runID, _, _ := unstructured.NestedString(obj.Object, "status", "runId"); runID != "" || obj.GetDeletionTimestamp() != nil {
		return nil
	}
	var refs []engine.Ref
	if class, _, _ := unstructured.NestedString(obj.Object, "spec", "sandboxClass"); class != "" {
		refs = append(refs, engine.Ref{Kind: evalsi.SandboxClassKind.Kind, Key: class})
	}
	if server, _, _ := unstructured.NestedString(obj.Object, "spec", "target", "checkpointServer"); server != "" {
		refs = append(refs, engine.Ref{Kind: evalsi.CheckpointServerKind.Kind, Key: obj.GetNamespace() + "/" + server})
	}
	return refs
}

// evalRuns is the EvalRun kind's External.
type evalRuns struct {
	api      *apiclient.Client
	opts     Options
	follower *Follower
}

// Observe reads the object's run: from the follower's last batch when it is fresh, else with
// GetRun. A run that ended needs nothing more; an object with no run yet has none.
func (er *evalRuns) Observe(ctx context.Context, r *engine.Request) (engine.Observation, error) {
	runID, _, _ := unstructured.NestedString(r.Object.Object, "status", "runId")
	phase, _, _ := unstructured.NestedString(r.Object.Object, "status", "phase")
	switch {
	case evalsi.TerminalPhase(phase):
		return er.finished(ctx, r)
	case runID == "":
		return engine.Observation{}, nil
	}
	run, ok := er.follower.fresh(r.Project, runID, er.opts.PollInterval, er.opts.Clock.Now())
	if !ok {
		resp, err := er.api.Runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: r.Project, Id: runID}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			return engine.Observation{}, engine.Terminalf(evalsi.ReasonRunNotFound, "run %s is not on the server any more", runID)
		}
		if err != nil {
			return engine.Observation{}, apicall.Failure("reading the run", err)
		}
		run = resp.Msg.Run
	}
	if run.Namespace != "" && run.Namespace != r.Object.GetNamespace() {
		// Whoever may write the status could name another namespace's run there: its status is
		// not copied, and Delete finds the run by the EvalRun's own key. (An evalsid that says no
		// run's namespace cannot be checked; the contract has it say.)
		return engine.Observation{}, engine.Terminalf(evalsi.ReasonRunNotFound, "status.runId names run %s, which was not made for this namespace's EvalRuns", runID)
	}
	return er.observed(r.Object, run), nil
}

// observed is the Observation of obj's run: its status, and a look again while it runs, or when
// it expires once it ended.
func (er *evalRuns) observed(obj *unstructured.Unstructured, run *v1.Run) engine.Observation {
	st := runStatus(run)
	obs := engine.Observation{Exists: true, UpToDate: true, Status: st}
	if !evalsi.TerminalPhase(st.Fields["phase"].(string)) {
		// The server sends no events: the follower reads every running run each poll interval
		// and queues the EvalRuns whose run changed; this requeue is the fallback when it could
		// not.
		obs.RequeueAfter = er.fallback()
		return obs
	}
	completed, _ := st.Fields["completedAt"].(string)
	if at, keep := er.expiry(obj, completed); !keep {
		st.Fields["expiresAt"] = at.UTC().Format(time.RFC3339)
		// Expiry is a time, not an event: look again then.
		obs.RequeueAfter = max(at.Sub(er.opts.Clock.Now()), time.Second)
	}
	return obs
}

// Create creates the object's run, once: the idempotency key is the object's uid, so a crash
// between the create and the status write never makes a second run. It waits for the SandboxClass
// to admit the namespace and for a target CheckpointServer to be Ready.
func (er *evalRuns) Create(ctx context.Context, r *engine.Request) (engine.Observation, error) {
	obj := r.Object
	spec, err := render.RunSpec(obj)
	if err != nil {
		return engine.Observation{}, engine.Terminal(evalsi.ReasonInvalidSpec, err)
	}
	if er.opts.ClassRefusal != nil {
		if refused := er.opts.ClassRefusal(ctx, r.Controller, obj.GetNamespace(), spec.SandboxClass); refused != nil {
			return engine.Observation{Status: &engine.Status{Conditions: []engine.Condition{*refused}}, RequeueAfter: er.opts.ClassRecheck}, nil
		}
	}
	if waiting, err := resolveTarget(ctx, r, spec); err != nil || waiting != nil {
		return engine.Observation{Status: waiting, RequeueAfter: targetRecheck}, err
	}
	resp, err := er.api.Runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
		Project:        r.Project,
		IdempotencyKey: string(obj.GetUID()),
		Creator:        obj.GetAnnotations()[evalsi.AnnotationCreatedBy],
		Spec:           spec,
		Name:           obj.GetNamespace() + "/" + obj.GetName(),
		Namespace:      obj.GetNamespace(),
	}))
	if err != nil {
		return engine.Observation{}, apicall.Failure("creating the run", err)
	}
	run := resp.Msg.Run
	r.Controller.Eventf(obj, corev1.EventTypeNormal, "Created", "created run %s in project %s", run.Id, r.Project)
	return er.observed(obj, run), nil
}

// Finished says that the run of an EvalRun with status ended: deleting it then calls nothing (a
// finished run is not cancelled), so it needs no finalizer, and goes at once when deleted, with
// or without the operator.
func (er *evalRuns) Finished(status map[string]any) bool {
	phase, _ := status["phase"].(string)
	return evalsi.TerminalPhase(phase)
}

// Update has nothing to do: an EvalRun's spec is immutable, and its run is never changed.
func (er *evalRuns) Update(context.Context, *engine.Request) (engine.Observation, error) {
	return engine.Observation{Exists: true, UpToDate: true}, nil
}

// Delete cancels the run of a deleted EvalRun unless it has ended; its results so far stay on
// the server. While the server cannot confirm, the finalizer stays and the condition says why.
// The run is found by the idempotency key the EvalRun made it with, never by status.runId: a
// status is written by whoever holds the status subresource, and a run id written there could
// name a run the EvalRun never made.
func (er *evalRuns) Delete(ctx context.Context, r *engine.Request) error {
	obj := r.Object
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	if evalsi.TerminalPhase(phase) {
		return nil
	}
	resp, err := er.api.Runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: r.Project, IdempotencyKey: string(obj.GetUID())}))
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound:
		return nil // never made, or made before a crash left it unrecorded: nothing to cancel
	case err != nil:
		return apicall.Failure("finding the run to cancel", err)
	}
	runID := resp.Msg.Run.Id
	if evalsi.TerminalPhase(phaseNames[resp.Msg.Run.Phase]) {
		return nil
	}
	if _, err := er.api.Runs.CancelRun(ctx, connect.NewRequest(&v1.CancelRunRequest{Project: r.Project, Id: runID})); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		return apicall.Failure("cancelling the run before deletion", err)
	}
	r.Controller.Log().Info("cancelled the run of a deleted EvalRun; its results so far are kept", "namespace", obj.GetNamespace(), "name", obj.GetName(), "run", runID)
	r.Controller.Eventf(obj, corev1.EventTypeNormal, evalsi.PhaseCancelled, "cancelled run %s because the EvalRun was deleted; its results so far are kept", runID)
	return nil
}

// resolveTarget fills in the endpoint of a target that names a CheckpointServer. While the
// CheckpointServer is missing or not Ready, it returns the status that says so.
func resolveTarget(ctx context.Context, r *engine.Request, spec *v1.RunSpec) (*engine.Status, error) {
	name := spec.GetTarget().GetCheckpointServer()
	if name == "" {
		return nil, nil
	}
	cs, err := r.Controller.Lookup(ctx, evalsi.CheckpointServers, r.Object.GetNamespace(), name)
	if apierrors.IsNotFound(err) {
		return engine.NotReady(evalsi.ReasonWaitingForTarget, fmt.Sprintf("waiting for CheckpointServer %s to exist", name)), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading CheckpointServer %s: %w", name, err)
	}
	observed, _, _ := unstructured.NestedInt64(cs.Object, "status", "observedGeneration")
	csStatus, _, _ := unstructured.NestedMap(cs.Object, "status")
	if engine.ReadyOf(csStatus)["status"] != "True" || observed != cs.GetGeneration() {
		return engine.NotReady(evalsi.ReasonWaitingForTarget, fmt.Sprintf("waiting for CheckpointServer %s to be Ready", name)), nil
	}
	endpoint, _, _ := unstructured.NestedString(cs.Object, "status", "endpoint")
	model, _, _ := unstructured.NestedString(cs.Object, "status", "servedModelName")
	if spec.Target.Endpoint == nil {
		spec.Target.Endpoint = &v1.EndpointTarget{}
	}
	spec.Target.Endpoint.Url, spec.Target.Endpoint.Model = endpoint, model
	spec.Target.Endpoint.ApiKeyEnv = spec.Target.ApiKeyEnv
	return nil, nil
}

// fallback is how long a running EvalRun waits for its next reconcile when nothing changes: a
// few poll intervals, for the follower to have read its run in between.
func (er *evalRuns) fallback() time.Duration { return jitter(3 * er.opts.PollInterval) }

// jitter returns d spread by ±20%.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}
