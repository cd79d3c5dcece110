// Package workloads is the kinds the operator renders into Kubernetes objects: Evaluator and
// SandboxClass pools (a Deployment, its service account, NetworkPolicy and, when autoscaled, a
// KEDA ScaledObject) and CheckpointServers (a vLLM Deployment and Service). Each reconcile gathers
// its inputs (the rendering from package render, the live children from the engine's caches, a
// SandboxClass or service account it names), decides the status with a pure function
// (statuses.go), and acts through the engine (Controller.SyncChildren).
package workloads

import (
	"slices"

	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/reconcile/engine/cached"
	"evals.si/operator/render"
	"evals.si/operator/schemas"
)

// Options configure the workload kinds.
type Options struct {
	// Render are the rendering options; Autoscaling and the project are set per reconcile.
	Render render.Options
	// NamespaceLabels returns the labels of a namespace, for the SandboxClass check (nil: none
	// known, which a class that selects namespaces does not admit).
	NamespaceLabels func(namespace string) map[string]string
	// ClassRecheck is how often an object whose SandboxClass or service account is missing or
	// not allowed looks again; a change of its namespace's labels reconciles it at once, and so
	// does a change of the class where this operator runs the SandboxClass controller (usesClass).
	ClassRecheck time.Duration
}

// poolChildren are the resources of an Evaluator's or a SandboxClass's children; a pod rung
// SandboxClass also has its launcher's Role and RoleBinding and its trial shape (classChildren).
var (
	poolChildren  = []schema.GroupVersionResource{evalsi.ServiceAccounts, evalsi.Deployments, evalsi.ScaledObjects, evalsi.TriggerAuthentications, evalsi.NetworkPolicies}
	classChildren = append(slices.Clone(poolChildren), evalsi.Roles, evalsi.RoleBindings, evalsi.PodTemplates)
)

// poolOrder is the order of a pool's children: its ServiceAccount and trial shape go first, as a
// pod the Deployment controller creates before its service account exists is refused and retried
// only after a backoff, and a pod rung launcher may make trial pods only once its class's trial
// shape (a PodTemplate, which the API server holds its pods to) is there; its Role goes with the
// rest. No longer desired, the launcher's rights go first and the trial shape last, so that there
// is no moment when the launcher may make pods and its shape is gone.
var poolOrder = &engine.ChildOrder{
	ApplyFirst:  []string{"ServiceAccount", "PodTemplate"},
	DeleteFirst: []string{"Role", "RoleBinding"},
	DeleteLast:  []string{"PodTemplate"},
}

// scaledReplicas is the field a pool's Deployment is rendered without once its ScaledObject
// scales it (KEDA's HPA then owns it): its value is handed over rather than reset to 1.
var scaledReplicas = map[string][]string{"Deployment": {"spec", "replicas"}}

// Evaluators is the Evaluator kind.
func Evaluators(opts Options) *engine.Kind {
	k := engine.NewKind(evalsi.EvaluatorKind)
	k.Validate = schemas.Validate // once a generation: render only decodes it then (Request.SpecChecked)
	k.ChildResources, k.ChildOrder, k.Handover = poolChildren, poolOrder, scaledReplicas
	k.Reconciler = pools{opts: opts}
	k.Refers = usesClass
	return k
}

// usesClass is the SandboxClass an Evaluator names, whose coming, going or change of
// allowedNamespaces decides whether it may have a pool.
func usesClass(obj *unstructured.Unstructured) []engine.Ref {
	if class := stringAt(obj, "spec", "sandboxClass"); class != "" {
		return []engine.Ref{{Kind: evalsi.SandboxClassKind.Kind, Key: class}}
	}
	return nil
}

// SandboxClasses is the SandboxClass kind: cluster-scoped, with its pools in the sandbox namespace.
func SandboxClasses(opts Options) *engine.Kind {
	k := engine.NewKind(evalsi.SandboxClassKind)
	k.Validate = schemas.Validate // once a generation: render only decodes it then (Request.SpecChecked)
	k.ChildResources, k.ChildOrder, k.Handover = classChildren, poolOrder, scaledReplicas
	k.ChildNamespace = opts.Render.SandboxNamespace
	k.Reconciler = pools{opts: opts, sandbox: true}
	k.Shared = true // Evaluators and EvalRuns of every shard read their class.
	return k
}

// CheckpointServers is the CheckpointServer kind.
func CheckpointServers(opts Options) *engine.Kind {
	k := engine.NewKind(evalsi.CheckpointServerKind)
	k.Validate = schemas.Validate // once a generation: render only decodes it then (Request.SpecChecked)
	k.ChildResources = []schema.GroupVersionResource{evalsi.ServiceAccounts, evalsi.Deployments, evalsi.Services, evalsi.NetworkPolicies}
	k.ChildOrder = poolOrder // its ServiceAccount first
	k.Reconciler = checkpointServers{opts: opts}
	k.Shared = true // EvalRuns of every shard read and wait on their target server.
	return k
}

// render renders r's object with the options of this reconcile: autoscaling when KEDA's
// resources are served, the project the engine found, and its schema left unchecked when the
// engine has checked this generation (Kind.Validate). A spec that does not render is
// terminal (InvalidSpec); the object is rendered again at each reconcile, so that a fixed
// operator setting is picked up.
func (o Options) render(r *engine.Request) (render.Result, error) {
	opts := o.Render
	opts.Autoscaling = r.Controller.Served(evalsi.ScaledObjects) && r.Controller.Served(evalsi.TriggerAuthentications)
	if ns := r.Object.GetNamespace(); ns != "" {
		opts.ProjectBindings = map[string]string{ns: r.Project}
	}
	opts.SpecChecked = r.SpecChecked
	res, err := render.Object(r.Object, opts)
	if err != nil {
		return res, engine.Terminal(evalsi.ReasonInvalidSpec, err)
	}
	return res, nil
}

// pools reconciles Evaluators and SandboxClasses.
type pools struct {
	opts    Options
	sandbox bool
}

// Reconcile renders the pool, syncs its children and reports the Deployment's rollout. A pool
// whose SandboxClass or service account it may not use has no children.
func (p pools) Reconcile(ctx context.Context, r *engine.Request) (engine.Outcome, error) {
	c, obj := r.Controller, r.Object
	refused := p.opts.ClassRefusal(ctx, c, obj.GetNamespace(), stringAt(obj, "spec", "sandboxClass"))
	if refused == nil && !p.sandbox {
		refused = accountRefusal(ctx, c, obj)
	}
	if refused != nil {
		if _, err := c.SyncChildren(ctx, r, nil); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{Status: &engine.Status{Conditions: []engine.Condition{*refused}}, RequeueAfter: p.opts.ClassRecheck}, nil
	}
	res, err := p.opts.render(r)
	if err != nil {
		return engine.Outcome{}, err
	}
	live, err := c.SyncChildren(ctx, r, res.Objects)
	if err != nil {
		return engine.Outcome{}, err
	}
	deploy := live.Get("Deployment", res.Pool.Namespace, res.Pool.Deployment)
	rollout := cached.RolloutOf(deploy)
	st := poolStatus(res.Pool, p.sandbox, rollout)
	if !p.sandbox || res.Pool.Deployment == "" {
		return engine.Outcome{Status: st}, nil
	}
	// A sandbox pool's pods say what confines them (their isolation probe's termination
	// message). The operator watches no pods: it reads them at each reconcile, and looks again
	// while the rollout is not done, since a probe that fails after the Deployment's status last
	// changed changes nothing the operator watches.
	pods, err := c.Kube().CoreV1().Pods(res.Pool.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: evalsi.LabelName + "=sandboxclass," + evalsi.LabelInstance + "=" + obj.GetName(),
	})
	if err != nil {
		return engine.Outcome{}, fmt.Errorf("listing the pool's pods for their isolation probes: %w", err)
	}
	withIsolation(st, stringAt(obj, "spec", "rung"), probeOutcomes(pods.Items))
	out := engine.Outcome{Status: st}
	if !rollout.Done {
		out.RequeueAfter = isolationRecheck
	}
	return out, nil
}

// isolationRecheck is how often a SandboxClass whose pool is not rolled out reads its pods'
// probes again: a class says why its pool does not start within about this long.
const isolationRecheck = 20 * time.Second

// checkpointServers reconciles CheckpointServers.
type checkpointServers struct{ opts Options }

// Reconcile renders the vLLM Deployment and Service, syncs them, and reports the endpoint.
func (cs checkpointServers) Reconcile(ctx context.Context, r *engine.Request) (engine.Outcome, error) {
	res, err := cs.opts.render(r)
	if err != nil {
		return engine.Outcome{}, err
	}
	live, err := r.Controller.SyncChildren(ctx, r, res.Objects)
	if err != nil {
		return engine.Outcome{}, err
	}
	deploy := live.Get("Deployment", r.Object.GetNamespace(), res.Served.Deployment)
	return engine.Outcome{Status: checkpointServerStatus(res.Served, cached.RolloutOf(deploy))}, nil
}

// stringAt returns the string at path in obj, "" when there is none.
func stringAt(obj *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(obj.Object, path...)
	return s
}
