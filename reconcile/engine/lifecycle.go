package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// External is what a kind keeps in an external API (evalsid) for each of its objects, behind
// small idempotent calls, as crossplane-runtime's managed reconciler has it. Managed runs them in
// one lifecycle: a finalizer holds the object until Delete has let go of the external object.
type External interface {
	// Observe reads the external object: whether it exists, whether it holds the spec, and the
	// status to report of it.
	Observe(ctx context.Context, r *Request) (Observation, error)
	// Create makes the external object; it may instead report that it waits for something
	// (a status and a requeue, Exists false).
	Create(ctx context.Context, r *Request) (Observation, error)
	// Update makes the external object hold the spec.
	Update(ctx context.Context, r *Request) (Observation, error)
	// Delete lets go of the external object of a deleted object; a success releases the finalizer.
	Delete(ctx context.Context, r *Request) error
}

// Finisher is an External whose objects can be done with their external object (a run that
// ended): such an object needs nothing at deletion, so its finalizer goes, and it can be deleted
// without the operator.
type Finisher interface {
	// Finished says so from status fields: the object's, or those an Observation reports.
	Finished(status map[string]any) bool
}

// Observation is what a call of an External learned of the external object.
type Observation struct {
	// Exists says that the external object exists; UpToDate that it holds the spec (or cannot
	// change: a run that ended).
	Exists, UpToDate bool
	// Status is what to report of it; nil reports nothing new.
	Status *Status
	// RequeueAfter, when positive, looks again after this long (an external state that sends no
	// events).
	RequeueAfter time.Duration
}

// Managed returns the Reconciler of a kind kept in an external API: a deleted object's external
// object is let go (Delete) before its finalizer goes; any other object gets the finalizer, and
// its external object is observed, created when missing and updated when it does not hold the
// spec. An object Finished with its external object (by its status, or by what was just
// observed) loses the finalizer. Nothing is called for an object whose spec the external API
// refused for its generation.
func Managed(finalizer string, ext External) Reconciler {
	return ReconcilerFunc(func(ctx context.Context, r *Request) (Outcome, error) {
		c, obj := r.Controller, r.Object
		if obj.GetDeletionTimestamp() != nil {
			if !slices.Contains(obj.GetFinalizers(), finalizer) {
				return Outcome{}, nil
			}
			// After a release the cache may still show the object held; acting on that would
			// repeat the calls of the release.
			if held, err := c.stillHeld(ctx, obj, finalizer); err != nil || !held {
				return Outcome{}, err
			}
			if err := ext.Delete(ctx, r); err != nil {
				return outcomeOf(Observation{}, err)
			}
			return Outcome{}, c.setFinalizer(ctx, obj, finalizer, false)
		}
		if r.Refused != "" {
			// The external API refused this spec, and would again: no call until it changes.
			return Outcome{}, nil
		}
		fin, _ := ext.(Finisher)
		finished := func(status map[string]any) bool { return fin != nil && fin.Finished(status) }
		status, _ := obj.Object["status"].(map[string]any)
		done := finished(status)
		if err := c.setFinalizer(ctx, obj, finalizer, !done); err != nil {
			return Outcome{}, err
		}
		obs, err := ext.Observe(ctx, r)
		switch {
		case err != nil:
		case !obs.Exists:
			obs, err = ext.Create(ctx, r)
		case !obs.UpToDate:
			obs, err = ext.Update(ctx, r)
		}
		if err == nil && !done && obs.Status != nil && finished(obs.Status.Fields) {
			// It finished just now: the finalizer goes in this reconcile, not the next.
			if err := c.setFinalizer(ctx, obj, finalizer, false); err != nil {
				return Outcome{}, err
			}
		}
		return outcomeOf(obs, err)
	})
}

// Failed is an Observation and error of a failed external call: the status that explains it, and
// the error that decides the retry (a TerminalError when retrying cannot help).
type Failed struct {
	Status *Status
	Err    error
}

func (f *Failed) Error() string { return f.Err.Error() }
func (f *Failed) Unwrap() error { return f.Err }

// outcomeOf turns an Observation and the error of the call that made it into an Outcome; a Failed
// error brings the status that explains it.
func outcomeOf(obs Observation, err error) (Outcome, error) {
	var f *Failed
	if errors.As(err, &f) {
		return Outcome{Status: f.Status}, f.Err
	}
	return Outcome{Status: obs.Status, RequeueAfter: obs.RequeueAfter}, err
}

// stillHeld reads obj afresh and reports whether it still carries finalizer. obj is updated to
// what was read.
func (c *Controller) stillHeld(ctx context.Context, obj *unstructured.Unstructured, finalizer string) (bool, error) {
	fresh, err := c.client.Resource(c.kind.Resource).Namespace(obj.GetNamespace()).Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s %s: %w", c.kind.Name, obj.GetName(), err)
	}
	obj.Object = fresh.Object
	return slices.Contains(obj.GetFinalizers(), finalizer), nil
}

// ReleaseFinalizers removes the finalizers of the selected kinds from every object, so that
// nothing waits on an operator that is being uninstalled: the objects stay, their external objects
// stay, and deleting them later completes at once. It returns how many objects it released.
func (e *Engine) ReleaseFinalizers(ctx context.Context) (int, error) {
	released := 0
	for _, k := range e.wanted() {
		if k.Finalizer == "" {
			continue
		}
		list, err := e.client.Resource(k.Resource).Namespace(e.cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return released, fmt.Errorf("listing %s: %w", k.Resource.Resource, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if !slices.Contains(obj.GetFinalizers(), k.Finalizer) {
				continue
			}
			if err := e.patchFinalizer(ctx, k.Resource, obj, k.Finalizer, false); err != nil {
				return released, fmt.Errorf("%s %s/%s: %w", k.Name, obj.GetNamespace(), obj.GetName(), err)
			}
			released++
		}
	}
	return released, nil
}
