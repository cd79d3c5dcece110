package workloads

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/reconcile/engine/cached"
	"evals.si/operator/render"
)

// These tables decide statuses from gathered inputs alone: they start no process.

// ready returns the Ready condition of st.
func ready(st *engine.Status) engine.Condition {
	for _, c := range st.Conditions {
		if c.Type == evalsi.ConditionReady {
			return c
		}
	}
	return engine.Condition{}
}

// rolledOut is the rollout of a Deployment whose replicas all run the current spec.
func rolledOut(replicas int64) cached.Rollout {
	return cached.Rollout{Done: true, Replicas: replicas, Ready: replicas}
}

func TestPoolStatus(t *testing.T) {
	for name, tc := range map[string]struct {
		pool        render.Pool
		sandbox     bool
		deploy      cached.Rollout
		status      string
		reason      string
		autoscaling any
	}{
		"Deployment not made yet": {pool: render.Pool{Deployment: "judge-evaluator", Replicas: 2}, deploy: cached.Rollout{Message: "waiting"},
			status: "False", reason: evalsi.ReasonRollingOut, autoscaling: "Fixed"},
		"rolled out, fixed replicas": {pool: render.Pool{Deployment: "judge-evaluator", Replicas: 2}, deploy: rolledOut(2),
			status: "True", reason: evalsi.ReasonAvailable, autoscaling: "Fixed"},
		"rolled out, scaled by KEDA": {pool: render.Pool{Deployment: "judge-evaluator", Autoscaled: true}, deploy: rolledOut(1),
			status: "True", reason: evalsi.ReasonAvailable, autoscaling: "KEDA"},
		"autoscaling asked for, KEDA missing": {pool: render.Pool{Deployment: "judge-evaluator", AutoscalingUnavailable: true, Replicas: 1},
			deploy: rolledOut(1), status: "True", reason: evalsi.ReasonAutoscalingUnavailable, autoscaling: "Unavailable"},
		"sandbox pool rolled out": {pool: render.Pool{Deployment: "sandbox-landlock", Namespace: "evalsi-sandbox", Replicas: 1},
			sandbox: true, deploy: rolledOut(1), status: "True", reason: evalsi.ReasonAvailable},
	} {
		t.Run(name, func(t *testing.T) {
			st := poolStatus(tc.pool, tc.sandbox, tc.deploy)
			if c := ready(st); c.Status != tc.status || c.Reason != tc.reason || c.Message == "" {
				t.Errorf("Ready = %+v, want %s/%s with a message", c, tc.status, tc.reason)
			}
			if got := st.Fields["autoscaling"]; got != tc.autoscaling {
				t.Errorf("autoscaling = %v, want %v", got, tc.autoscaling)
			}
			if _, set := st.Fields["namespace"]; set != tc.sandbox {
				t.Errorf("namespace field set = %v, want %v (sandbox pools only)", set, tc.sandbox)
			}
		})
	}
}

func TestCheckpointServerStatus(t *testing.T) {
	served := render.Served{Deployment: "m-vllm", Endpoint: "http://m-vllm.team-a.svc:8000/v1", ModelName: "m"}
	for name, tc := range map[string]struct {
		deploy cached.Rollout
		status string
		reason string
	}{
		"not made yet":        {cached.Rollout{Message: "waiting for the Deployment to be created"}, "False", evalsi.ReasonRollingOut},
		"scaled to zero":      {rolledOut(0), "False", evalsi.ReasonNoReplicas},
		"a replica serves":    {rolledOut(1), "True", evalsi.ReasonServing},
		"old revision serves": {cached.Rollout{Message: "0 of 1 replicas run the current spec", Replicas: 1, Ready: 1}, "False", evalsi.ReasonRollingOut},
	} {
		t.Run(name, func(t *testing.T) {
			st := checkpointServerStatus(served, tc.deploy)
			if c := ready(st); c.Status != tc.status || c.Reason != tc.reason {
				t.Errorf("Ready = %+v, want %s/%s", c, tc.status, tc.reason)
			}
			if st.Fields["endpoint"] != served.Endpoint || st.Fields["servedModelName"] != "m" {
				t.Errorf("fields %v lack the endpoint and model", st.Fields)
			}
		})
	}
}

func TestClassRefusal(t *testing.T) {
	class := func(selector map[string]any) *unstructured.Unstructured {
		spec := map[string]any{"rung": "bubblewrap", "replicas": int64(1)}
		if selector != nil {
			spec["allowedNamespaces"] = selector
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass", "metadata": map[string]any{"name": "bwrap"}, "spec": spec,
		}}
	}
	allowed := map[string]any{"matchLabels": map[string]any{"sandbox.evals.si/bubblewrap": "allowed"}}
	gr := schema.GroupResource{Group: evalsi.Group, Resource: "sandboxclasses"}
	for name, tc := range map[string]struct {
		class  *unstructured.Unstructured
		err    error
		labels map[string]string
		reason string // "" when the namespace may use the class
	}{
		"no allowedNamespaces: no namespace":    {class: class(nil), labels: map[string]string{"sandbox.evals.si/bubblewrap": "allowed"}, reason: evalsi.ReasonClassNotAllowed},
		"allowedNamespaces {}: every namespace": {class: class(map[string]any{})},
		"selected by its label":                 {class: class(allowed), labels: map[string]string{"sandbox.evals.si/bubblewrap": "allowed"}},
		"not selected":                          {class: class(allowed), labels: map[string]string{"team": "b"}, reason: evalsi.ReasonClassNotAllowed},
		"not selected, no labels":               {class: class(allowed), reason: evalsi.ReasonClassNotAllowed},
		"missing class":                         {err: apierrors.NewNotFound(gr, "bwrap"), reason: evalsi.ReasonClassNotFound},
		"cannot be read: fails closed":          {err: apierrors.NewForbidden(gr, "bwrap", errors.New("no")), reason: evalsi.ReasonClassNotAllowed},
	} {
		t.Run(name, func(t *testing.T) {
			c := classRefusal("team-b", "bwrap", tc.class, tc.err, tc.labels)
			switch {
			case tc.reason == "" && c != nil:
				t.Errorf("refused: %+v", *c)
			case tc.reason != "" && (c == nil || c.Reason != tc.reason || c.Status != "False"):
				t.Errorf("got %+v, want Ready=False %s", c, tc.reason)
			}
		})
	}
}

func TestAccountRefusal(t *testing.T) {
	account := func(labels map[string]string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "judge", Namespace: "team-b", Labels: labels}}
	}
	gr := schema.GroupResource{Resource: "serviceaccounts"}
	for name, tc := range map[string]struct {
		sa      *corev1.ServiceAccount
		err     error
		refused string // "" when pools may run as the account
	}{
		"opened to pools":              {sa: account(map[string]string{evalsi.LabelPoolServiceAccount: "true"})},
		"not labelled":                 {sa: account(nil), refused: "is not open to pools"},
		"labelled with another value":  {sa: account(map[string]string{evalsi.LabelPoolServiceAccount: "yes"}), refused: "is not open to pools"},
		"missing":                      {err: apierrors.NewNotFound(gr, "judge"), refused: "does not exist"},
		"cannot be read: fails closed": {err: apierrors.NewForbidden(gr, "judge", errors.New("no")), refused: "cannot read service account judge"},
	} {
		t.Run(name, func(t *testing.T) {
			c := serviceAccountRefusal("team-b", "judge", tc.sa, tc.err)
			switch {
			case tc.refused == "" && c != nil:
				t.Errorf("refused: %+v", *c)
			case tc.refused != "" && (c == nil || c.Reason != evalsi.ReasonServiceAccountNotAllowed || c.Status != "False" || !strings.Contains(c.Message, tc.refused)):
				t.Errorf("got %+v, want Ready=False %s with %q", c, evalsi.ReasonServiceAccountNotAllowed, tc.refused)
			}
		})
	}
}
