package reconcile

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// The status decisions of every kind, apart from the doing: each takes what a reconcile gathered
// (the rendering, the live children, the server's answer) and returns the status, with no client
// and no clock, so that statuses_test.go decides every case in a table without a control plane.

// poolStatus is the status of an Evaluator (or, with sandbox, a SandboxClass) whose pool rendered
// as pool and whose Deployment is deploy (nil when absent).
func poolStatus(pool render.Pool, sandbox bool, deploy *cachedChild) *Status {
	fields := map[string]any{}
	if sandbox {
		fields["namespace"] = pool.Namespace
	}
	if pool.Deployment == "" {
		return &Status{Fields: fields, Conditions: []Condition{
			Ready(true, evalsi.ReasonNoPool, "trials run in a pod of their own; the pod rung has no pool"),
		}}
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
	r := rolloutOf(deploy)
	fields["replicas"] = r.replicas
	fields["readyReplicas"] = r.ready
	var ready Condition
	switch {
	case !r.done:
		ready = Ready(false, evalsi.ReasonRollingOut, r.message)
	case pool.AutoscalingUnavailable:
		ready = Ready(true, evalsi.ReasonAutoscalingUnavailable, fmt.Sprintf(
			"autoscaling is set but KEDA's ScaledObject is not served in this cluster: running %d fixed replicas", pool.Replicas))
	default:
		ready = Ready(true, evalsi.ReasonAvailable, "the pool's current spec is rolled out")
	}
	return &Status{Fields: fields, Conditions: []Condition{ready}}
}

// checkpointServerStatus is the status of a CheckpointServer that serves as served and whose
// Deployment is deploy: Ready only once the current spec is rolled out and one of its replicas
// passes /health, so a spec change is not Ready on the old revision's replica.
func checkpointServerStatus(served render.Served, deploy *cachedChild) *Status {
	r := rolloutOf(deploy)
	fields := map[string]any{
		"endpoint":        served.Endpoint,
		"servedModelName": served.ModelName,
		"readyReplicas":   r.ready,
	}
	var ready Condition
	switch {
	case !r.done:
		ready = Ready(false, evalsi.ReasonRollingOut, r.message)
	case r.ready == 0:
		ready = Ready(false, evalsi.ReasonNoReplicas, "no replica of the current spec is serving")
	default:
		ready = Ready(true, evalsi.ReasonServing, "a replica of the current spec passes /health")
	}
	return &Status{Fields: fields, Conditions: []Condition{ready}}
}

// runStatus is the status of an EvalRun that follows run.
func runStatus(run *v1.Run) *Status {
	phase := phaseNames[run.Phase]
	if phase == "" {
		phase = evalsi.PhasePending
	}
	fields := map[string]any{"runId": run.Id, "url": run.Url, "phase": phase}
	if t := run.StartedAt; t != nil {
		fields["startedAt"] = t.AsTime().UTC().Format(time.RFC3339)
	}
	if t := run.CompletedAt; t != nil {
		fields["completedAt"] = t.AsTime().UTC().Format(time.RFC3339)
	}
	if s := run.Summary; s != nil {
		fields["summary"] = map[string]any{
			"total": s.Total, "passed": s.Passed, "failed": s.Failed, "errored": s.Errored, "score": s.Score,
		}
	}
	// Ready says the run exists and is followed; Complete and Failed say how it ended, as a Job's
	// do, so that `kubectl wait --for=condition=Complete` blocks until the run succeeds.
	ready := Ready(true, phase, "run "+run.Id+" is "+phase)
	complete := Condition{Type: evalsi.ConditionComplete, Status: "False", Reason: phase, Message: "run " + run.Id + " has not succeeded"}
	failed := Condition{Type: evalsi.ConditionFailed, Status: "False", Reason: phase, Message: "run " + run.Id + " has not failed"}
	switch phase {
	case evalsi.PhaseSucceeded:
		complete = Condition{Type: evalsi.ConditionComplete, Status: "True", Reason: phase, Message: "run " + run.Id + " succeeded"}
	case evalsi.PhaseFailed:
		msg := "the run failed"
		if run.Message != "" {
			msg = run.Message
		}
		ready = Ready(false, evalsi.PhaseFailed, msg)
		failed = Condition{Type: evalsi.ConditionFailed, Status: "True", Reason: evalsi.PhaseFailed, Message: msg}
	case evalsi.PhaseCancelled:
		msg := "the run was cancelled; its results so far are kept"
		ready = Ready(false, evalsi.PhaseCancelled, msg)
		failed = Condition{Type: evalsi.ConditionFailed, Status: "True", Reason: evalsi.PhaseCancelled, Message: msg}
	}
	return &Status{Fields: fields, Conditions: []Condition{ready, complete, failed}}
}

// appliedStatus is the status of a policy or trace source (what) that the server holds in
// project, with the fields the server reported.
func appliedStatus(what, project string, reported map[string]any) *Status {
	fields := map[string]any{"project": project}
	for k, v := range reported {
		fields[k] = v
	}
	return &Status{Fields: fields, Conditions: []Condition{
		Ready(true, evalsi.ReasonApplied, fmt.Sprintf("the %s is applied in project %s", what, project)),
	}}
}

// classRefusal is the Ready condition of an object in namespace ns (labelled nsLabels) that names
// the SandboxClass name, read as class (or the error reading it), when it may not use it:
// ClassNotFound when the class does not exist, ClassNotAllowed when its allowedNamespaces does not
// select the namespace or it could not be read to check (the check fails closed: a class may be
// privileged). Nil when it may.
func classRefusal(ns, name string, class *unstructured.Unstructured, readErr error, nsLabels map[string]string) *Condition {
	if apierrors.IsNotFound(readErr) {
		c := Ready(false, evalsi.ReasonClassNotFound, fmt.Sprintf("SandboxClass %s does not exist", name))
		return &c
	}
	if readErr != nil {
		c := Ready(false, evalsi.ReasonClassNotAllowed, fmt.Sprintf("cannot read SandboxClass %s to check that namespace %s may use it: %v", name, ns, readErr))
		return &c
	}
	ok, err := render.NamespaceMayUse(class, nsLabels)
	if err != nil || !ok {
		c := Ready(false, evalsi.ReasonClassNotAllowed, fmt.Sprintf("namespace %s may not use SandboxClass %s: its spec.allowedNamespaces does not select this namespace; a cluster administrator labels namespaces to allow them", ns, name))
		return &c
	}
	return nil
}

// accountRefusal returns the Ready condition of an Evaluator whose pods would run as the service
// account name, read as sa (or readErr), when that account is not opened to pools, or nil. It fails
// closed: an account the operator cannot read is not used.
func accountRefusal(ns, name string, sa *corev1.ServiceAccount, readErr error) *Condition {
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
	c := Ready(false, evalsi.ReasonServiceAccountNotAllowed, msg)
	return &c
}
