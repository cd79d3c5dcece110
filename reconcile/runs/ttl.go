package runs

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
)

// Finished EvalRuns expire, as finished Jobs do (ttlSecondsAfterFinished): each keeps an object in
// etcd and in every cache, and the results are evalsid's, not the object's. An EvalRun goes its
// TTL after its run ended: the evals.si/ttl-after-finished annotation, else the operator's
// --evalrun-ttl; with neither it stays. Deleting it calls nothing on evalsid (a finished run is
// not cancelled), so the run and its results stay there.

// expiry returns when obj, whose run ended at completed (RFC 3339; now when unknown), is to be
// deleted, or keep when it stays.
func (er *evalRuns) expiry(obj *unstructured.Unstructured, completed string) (at time.Time, keep bool) {
	ttl, keep := er.opts.TTL, er.opts.TTL <= 0
	if v, ok := obj.GetAnnotations()[evalsi.AnnotationTTLAfterFinished]; ok {
		// Admission refuses a value that does not parse; one that got past it keeps the default.
		if d, never, err := evalsi.ParseTTL(v); err == nil {
			ttl, keep = d, never
		}
	}
	if keep {
		return time.Time{}, true
	}
	ended, err := time.Parse(time.RFC3339, completed)
	if err != nil {
		ended = er.opts.Clock.Now()
	}
	return ended.Add(ttl), false
}

// finished is the Observation of an EvalRun whose run ended: nothing to ask evalsid; the time it
// expires reported (and looked at again then), or, once it has come, the object deleted.
func (er *evalRuns) finished(ctx context.Context, r *engine.Request) (engine.Observation, error) {
	obj := r.Object
	completed, _, _ := unstructured.NestedString(obj.Object, "status", "completedAt")
	at, keep := er.expiry(obj, completed)
	if keep {
		return engine.Observation{Exists: true, UpToDate: true, Status: &engine.Status{Fields: map[string]any{"expiresAt": nil}}}, nil
	}
	if wait := at.Sub(er.opts.Clock.Now()); wait > 0 {
		return engine.Observation{Exists: true, UpToDate: true, RequeueAfter: wait,
			Status: &engine.Status{Fields: map[string]any{"expiresAt": at.UTC().Format(time.RFC3339)}}}, nil
	}
	if err := r.Controller.DeleteObject(ctx, obj); err != nil {
		return engine.Observation{}, fmt.Errorf("deleting the expired EvalRun: %w", err)
	}
	runID, _, _ := unstructured.NestedString(obj.Object, "status", "runId")
	r.Controller.Eventf(obj, corev1.EventTypeNormal, evalsi.ReasonExpired,
		"deleted: its time after the run ended is up (ttl-after-finished); run %s and its results stay on evalsid", runID)
	return engine.Observation{Exists: true, UpToDate: true}, nil
}
