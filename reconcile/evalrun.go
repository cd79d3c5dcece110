package reconcile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"connectrpc.com/connect"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// phaseNames are the status phases of the server's run phases.
var phaseNames = map[v1.Phase]string{
	v1.Phase_PHASE_PENDING:   evalsi.PhasePending,
	v1.Phase_PHASE_RUNNING:   evalsi.PhaseRunning,
	v1.Phase_PHASE_SUCCEEDED: evalsi.PhaseSucceeded,
	v1.Phase_PHASE_FAILED:    evalsi.PhaseFailed,
	v1.Phase_PHASE_CANCELLED: evalsi.PhaseCancelled,
}

// reconcileEvalRun creates the object's run once (idempotency key: the object's uid), follows
// it until it ends, and cancels it when the object is deleted.
func reconcileEvalRun(ctx context.Context, e *Engine, k *kind, obj *unstructured.Unstructured) (Outcome, error) {
	project, err := render.Project(obj, e.renderOptions())
	if err != nil {
		return e.projectNotAllowed(ctx, k, obj, err)
	}
	if obj.GetDeletionTimestamp() != nil {
		return e.cancelRun(ctx, k, obj, project)
	}
	runID, _, _ := unstructured.NestedString(obj.Object, "status", "runId")
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	if evalsi.TerminalPhase(phase) {
		// The run has ended: nothing to follow, nothing to write.
		return Outcome{}, nil
	}
	if err := e.setFinalizer(ctx, k, obj, evalsi.FinalizerCancelRun, true); err != nil {
		return Outcome{}, err
	}

	var run *v1.Run
	if runID == "" {
		spec, err := render.RunSpec(obj)
		if err != nil {
			return Outcome{}, Terminal(evalsi.ReasonInvalidSpec, err)
		}
		if refused := e.sandboxClassRefusal(ctx, obj.GetNamespace(), spec.SandboxClass); refused != nil {
			return Outcome{Status: &Status{Fields: statusFields(obj), Conditions: []Condition{*refused}}, RequeueAfter: classRecheck}, nil
		}
		if waiting, err := e.resolveTarget(ctx, obj, spec); err != nil || waiting != nil {
			return Outcome{Status: waiting, RequeueAfter: 2 * time.Second}, err
		}
		resp, err := e.api.Runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{
			Project:        project,
			IdempotencyKey: string(obj.GetUID()),
			Creator:        obj.GetAnnotations()[evalsi.AnnotationCreatedBy],
			Spec:           spec,
			Name:           obj.GetNamespace() + "/" + obj.GetName(),
			Namespace:      obj.GetNamespace(),
		}))
		if err != nil {
			cond, err := apiFailure("creating the run", err)
			return Outcome{Status: &Status{Fields: statusFields(obj), Conditions: []Condition{cond}}}, err
		}
		if e.afterCreateRun != nil {
			if err := e.afterCreateRun(); err != nil {
				return Outcome{}, err
			}
		}
		run = resp.Msg.Run
		e.recorder.Eventf(obj, corev1.EventTypeNormal, "Created", "created run %s in project %s", run.Id, project)
	} else if followed, ok := e.runs.fresh(project, runID, e.cfg.RunPollInterval); ok {
		run = followed
	} else {
		resp, err := e.api.Runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: project, Id: runID}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			return Outcome{}, Terminalf(evalsi.ReasonRunNotFound, "run %s is not on the server any more", runID)
		}
		if err != nil {
			cond, err := apiFailure("reading the run", err)
			return Outcome{Status: &Status{Fields: statusFields(obj), Conditions: []Condition{cond}}}, err
		}
		run = resp.Msg.Run
	}
	st := runStatus(run)
	if evalsi.TerminalPhase(st.Fields["phase"].(string)) {
		return Outcome{Status: st}, nil
	}
	// The server sends no events: the follower reads every running run each poll interval and
	// queues the EvalRuns whose run changed; this requeue is the fallback when it could not.
	return Outcome{Status: st, RequeueAfter: e.runFallback()}, nil
}

// resolveTarget fills in the endpoint of a target that names a CheckpointServer. While the
// CheckpointServer is missing or not Ready, it returns the status that says so.
func (e *Engine) resolveTarget(ctx context.Context, obj *unstructured.Unstructured, spec *v1.RunSpec) (*Status, error) {
	name := spec.GetTarget().GetCheckpointServer()
	if name == "" {
		return nil, nil
	}
	waiting := func(msg string) *Status {
		return &Status{Conditions: []Condition{Ready(false, evalsi.ReasonWaitingForTarget, msg)}}
	}
	cs, err := e.client.Resource(evalsi.CheckpointServers).Namespace(obj.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return waiting(fmt.Sprintf("waiting for CheckpointServer %s to exist", name)), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading CheckpointServer %s: %w", name, err)
	}
	observed, _, _ := unstructured.NestedInt64(cs.Object, "status", "observedGeneration")
	csStatus, _, _ := unstructured.NestedMap(cs.Object, "status")
	if readyOf(csStatus)["status"] != "True" || observed != cs.GetGeneration() {
		return waiting(fmt.Sprintf("waiting for CheckpointServer %s to be Ready", name)), nil
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

// cancelRun cancels the run of a deleted EvalRun unless it has ended, then lets the object go.
// While the server cannot confirm, the finalizer stays and the condition says why.
func (e *Engine) cancelRun(ctx context.Context, k *kind, obj *unstructured.Unstructured, project string) (Outcome, error) {
	if !slices.Contains(obj.GetFinalizers(), evalsi.FinalizerCancelRun) {
		return Outcome{}, nil
	}
	if held, err := e.stillHeld(ctx, k, obj, evalsi.FinalizerCancelRun); err != nil || !held {
		return Outcome{}, err
	}
	runID, _, _ := unstructured.NestedString(obj.Object, "status", "runId")
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	if !evalsi.TerminalPhase(phase) {
		req := &v1.CancelRunRequest{Project: project, Id: runID}
		if runID == "" {
			// A crash between the create and the status write leaves the id unknown here;
			// the idempotency key finds the run, if it was made.
			resp, err := e.api.Runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: project, IdempotencyKey: string(obj.GetUID())}))
			switch {
			case connect.CodeOf(err) == connect.CodeNotFound:
				req = nil
			case err != nil:
				cond, err := apiFailure("finding the run to cancel", err)
				return Outcome{Status: &Status{Fields: statusFields(obj), Conditions: []Condition{cond}}}, err
			default:
				req.Id = resp.Msg.Run.Id
			}
		}
		if req != nil {
			if _, err := e.api.Runs.CancelRun(ctx, connect.NewRequest(req)); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
				cond, err := apiFailure("cancelling the run before deletion", err)
				return Outcome{Status: &Status{Fields: statusFields(obj), Conditions: []Condition{cond}}}, err
			}
			e.log.Info("cancelled the run of a deleted EvalRun; its results so far are kept", "namespace", obj.GetNamespace(), "name", obj.GetName(), "run", req.Id)
			e.recorder.Eventf(obj, corev1.EventTypeNormal, evalsi.PhaseCancelled, "cancelled run %s because the EvalRun was deleted; its results so far are kept", req.Id)
		}
	}
	return Outcome{}, e.setFinalizer(ctx, k, obj, evalsi.FinalizerCancelRun, false)
}

// jitter returns d spread by ±20%.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}
