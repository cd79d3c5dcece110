package workloads

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/reconcile/engine/cached"
	"evals.si/operator/render"
)

// The status decisions of the workload kinds, apart from the doing: each takes what a reconcile
// gathered (the rendering, the Deployment's rollout, a class or account read) and returns the
// status, with no client and no clock, so that statuses_test.go decides every case in a table.

// poolStatus is the status of an Evaluator (or, with sandbox, a SandboxClass) whose pool rendered
// as pool and whose Deployment has rolled out as r.
func poolStatus(pool render.Pool, sandbox bool, r cached.Rollout) *engine.Status {
	fields := map[string]any{"replicas": nil, "readyReplicas": nil}
	if sandbox {
		fields["namespace"] = pool.Namespace
	}
	if !sandbox {
		switch {
		case pool.Autoscaled:
			fields["autoscaling"] = "KEDA"
		case pool.AutoscalingUnavailable:
			fields["autoscaling"] = "Unavailable"
		default:
			fields["autoscaling"] = "Fixed"
		}
	}
	fields["replicas"] = r.Replicas
	fields["readyReplicas"] = r.Ready
	var ready engine.Condition
	switch {
	case !r.Done:
		ready = engine.Ready(false, evalsi.ReasonRollingOut, r.Message)
	case pool.AutoscalingUnavailable:
		ready = engine.Ready(true, evalsi.ReasonAutoscalingUnavailable, fmt.Sprintf(
			"autoscaling is set but KEDA's ScaledObject is not served in this cluster: running %d fixed replicas", pool.Replicas))
	default:
		ready = engine.Ready(true, evalsi.ReasonAvailable, "the pool's current spec is rolled out")
	}
	return &engine.Status{Fields: fields, Conditions: []engine.Condition{ready}}
}

// checkpointServerStatus is the status of a CheckpointServer that serves as served and whose
// Deployment has rolled out as r: Ready only once the current spec is rolled out and one of its
// replicas passes /health, so a spec change is not Ready on the old revision's replica.
func checkpointServerStatus(served render.Served, r cached.Rollout) *engine.Status {
	fields := map[string]any{
		"endpoint":        served.Endpoint,
		"servedModelName": served.ModelName,
		"readyReplicas":   r.Ready,
	}
	var ready engine.Condition
	switch {
	case !r.Done:
		ready = engine.Ready(false, evalsi.ReasonRollingOut, r.Message)
	case r.Ready == 0:
		ready = engine.Ready(false, evalsi.ReasonNoReplicas, "no replica of the current spec is serving")
	default:
		ready = engine.Ready(true, evalsi.ReasonServing, "a replica of the current spec passes /health")
	}
	return &engine.Status{Fields: fields, Conditions: []engine.Condition{ready}}
}

// classRefusal is the Ready condition of an object in namespace ns (labelled nsLabels) that names
// the SandboxClass name, read as class (or the error reading it), when it may not use it:
// ClassNotFound when the class does not exist, ClassNotAllowed when its allowedNamespaces does not
// select the namespace or it could not be read to check (the check fails closed: a class may be
// privileged). Nil when it may.
func classRefusal(ns, name string, class *unstructured.Unstructured, readErr error, nsLabels map[string]string) *engine.Condition {
	if apierrors.IsNotFound(readErr) {
		c := engine.Ready(false, evalsi.ReasonClassNotFound, fmt.Sprintf("SandboxClass %s does not exist", name))
		return &c
	}
	if readErr != nil {
		c := engine.Ready(false, evalsi.ReasonClassNotAllowed, fmt.Sprintf("cannot read SandboxClass %s to check that namespace %s may use it: %v", name, ns, readErr))
		return &c
	}
	ok, err := render.NamespaceMayUse(class, nsLabels)
	if err != nil || !ok {
		c := engine.Ready(false, evalsi.ReasonClassNotAllowed, fmt.Sprintf("namespace %s may not use SandboxClass %s: its spec.allowedNamespaces does not select this namespace; a cluster administrator labels namespaces to allow them", ns, name))
		return &c
	}
	return nil
}

// serviceAccountRefusal returns the Ready condition of an Evaluator whose pods would run as the
// service account name, read as sa (or readErr), when that account is not opened to pools, or nil.
// It fails closed: an account the operator cannot read is not used.
func serviceAccountRefusal(ns, name string, sa *corev1.ServiceAccount, readErr error) *engine.Condition {
	var msg string
	switch {
	case apierrors.IsNotFound(readErr):
		msg = fmt.Sprintf("service account %s does not exist in namespace %s", name, ns)
	case readErr != nil:
		msg = fmt.Sprintf("cannot read service account %s to check that pools may run as it: %v", name, readErr)
	case sa.Labels[evalsi.LabelPoolServiceAccount] != "true":
		msg = fmt.Sprintf("service account %s is not open to pools: a namespace administrator labels it %s=true to let Evaluators run as it", name, evalsi.LabelPoolServiceAccount)
	default:
		return nil
	}
	c := engine.Ready(false, evalsi.ReasonServiceAccountNotAllowed, msg)
	return &c
}
