package main

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
)

// fieldOwner is the peer's server-side apply field manager.
const fieldOwner = "evalsi-peer"

// EvaluatorReconciler reconciles an Evaluator: it applies the children the operator's render
// package gives and reports the pool's rollout in the status.
type EvaluatorReconciler struct {
	client.Client
	Render render.Options
	// Recorder writes an Event when the Ready condition changes, as the operator does.
	Recorder record.EventRecorder
}

// evaluatorStatus is the part of an Evaluator's status the peer writes, the same fields as the
// operator's.
type evaluatorStatus struct {
	ObservedGeneration int64              `json:"observedGeneration"`
	Autoscaling        string             `json:"autoscaling,omitempty"`
	Replicas           int64              `json:"replicas"`
	ReadyReplicas      int64              `json:"readyReplicas"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// Reconcile renders the Evaluator, applies each child and updates the status.
func (r *EvaluatorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ev := &unstructured.Unstructured{}
	ev.SetGroupVersionKind(evalsi.Evaluators.GroupVersion().WithKind("Evaluator"))
	if err := r.Get(ctx, req.NamespacedName, ev); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ev.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil
	}
	var status evaluatorStatus
	if old, ok := ev.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(old, &status)
	}
	before := status
	before.Conditions = slices.Clone(status.Conditions)

	res, err := render.Object(ev, r.Render)
	if err != nil {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: evalsi.ConditionReady, Status: metav1.ConditionFalse, Reason: evalsi.ReasonInvalidSpec,
			Message: err.Error(), ObservedGeneration: ev.GetGeneration(),
		})
		status.ObservedGeneration = ev.GetGeneration()
		return ctrl.Result{}, r.updateStatus(ctx, ev, before, status)
	}
	for _, child := range res.Objects {
		// The same children as the operator's, with their owner reference, labels and hash.
		if err := engine.StampChild(ev, child); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(child), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return ctrl.Result{}, fmt.Errorf("applying %s %s: %w", child.GetKind(), child.GetName(), err)
		}
	}

	var deploy appsv1.Deployment
	err = r.Get(ctx, types.NamespacedName{Namespace: res.Pool.Namespace, Name: res.Pool.Deployment}, &deploy)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	found := err == nil
	status.ObservedGeneration = ev.GetGeneration()
	status.Autoscaling = "Fixed"
	if res.Pool.Autoscaled {
		status.Autoscaling = "KEDA"
	}
	status.Replicas, status.ReadyReplicas = int64(deploy.Status.Replicas), int64(deploy.Status.ReadyReplicas)
	cond := metav1.Condition{Type: evalsi.ConditionReady, ObservedGeneration: ev.GetGeneration()}
	if done, why := rolledOut(found, &deploy); done {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, evalsi.ReasonAvailable, "the pool's current spec is rolled out"
	} else {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, evalsi.ReasonRollingOut, why
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	return ctrl.Result{}, r.updateStatus(ctx, ev, before, status)
}

// updateStatus writes status when it differs from before.
func (r *EvaluatorReconciler) updateStatus(ctx context.Context, ev *unstructured.Unstructured, before, status evaluatorStatus) error {
	if equality.Semantic.DeepEqual(before, status) {
		return nil
	}
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return err
	}
	ev.Object["status"] = st
	if err := r.Status().Update(ctx, ev); err != nil {
		return err
	}
	r.recordReady(ev, before, status)
	return nil
}

// recordReady records an Event when Ready changed, by the operator's rule: not for the first
// status of a new object unless it failed.
func (r *EvaluatorReconciler) recordReady(ev *unstructured.Unstructured, before, status evaluatorStatus) {
	was, now := meta.FindStatusCondition(before.Conditions, evalsi.ConditionReady), meta.FindStatusCondition(status.Conditions, evalsi.ConditionReady)
	if now == nil {
		return
	}
	if was == nil && (now.Status == metav1.ConditionTrue || now.Reason == evalsi.ReasonRollingOut) {
		return
	}
	if was != nil && was.Status == now.Status && was.Reason == now.Reason {
		return
	}
	kind := corev1.EventTypeNormal
	if now.Status != metav1.ConditionTrue {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Event(ev, kind, now.Reason, now.Message)
}

// rolledOut says whether the Deployment runs its current spec on every replica, or what it waits for.
func rolledOut(found bool, d *appsv1.Deployment) (bool, string) {
	if !found {
		return false, "waiting for the Deployment to be created"
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	switch {
	case s.ObservedGeneration < d.Generation:
		return false, fmt.Sprintf("waiting for Deployment %s to observe its new spec", d.Name)
	case s.UpdatedReplicas < want:
		return false, fmt.Sprintf("Deployment %s: %d of %d replicas run the current spec", d.Name, s.UpdatedReplicas, want)
	case s.Replicas > s.UpdatedReplicas:
		return false, fmt.Sprintf("Deployment %s: %d old replicas are terminating", d.Name, s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < s.UpdatedReplicas:
		return false, fmt.Sprintf("Deployment %s: %d of %d replicas are available", d.Name, s.AvailableReplicas, s.UpdatedReplicas)
	}
	return true, ""
}
