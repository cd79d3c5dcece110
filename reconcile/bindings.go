package reconcile

import (
	"context"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
)

// Project bindings: a cluster administrator binds a namespace to a project with the label
// evals.si/project on the Namespace, which namespace editors cannot write. The engine reads the
// bindings on every discovery pass, one LIST of namespaces (or, with --namespace, one GET of its
// namespace, which a namespaced RoleBinding allows, where a watch would need a cluster role) and
// reconciles again every object of a namespace whose labels changed, so an object that named a
// project its namespace was not bound to, or a SandboxClass it was not allowed to use, recovers by
// itself once it is.

// refreshBindings reads the namespaces' project bindings and requeues the objects of namespaces
// whose binding changed. When the namespaces cannot be read, the last bindings stay (at first:
// none, so every namespace acts only in the project named like it).
func (e *Engine) refreshBindings(ctx context.Context) {
	var namespaces []corev1.Namespace
	if ns := e.cfg.Namespace; ns != "" {
		n, err := e.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			e.log.Warn("cannot read the namespace's project binding; keeping the last one", "namespace", ns, "err", err)
			return
		}
		namespaces = []corev1.Namespace{*n}
	} else {
		list, err := e.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			e.log.Warn("cannot read the namespaces' project bindings; keeping the last ones", "err", err)
			return
		}
		namespaces = list.Items
	}
	bindings, nsLabels := map[string]string{}, map[string]map[string]string{}
	for _, n := range namespaces {
		if p := n.Labels[evalsi.LabelProject]; p != "" {
			bindings[n.Name] = p
		}
		nsLabels[n.Name] = n.Labels
	}
	e.mu.Lock()
	prev := e.nsLabels
	e.bindings, e.nsLabels = bindings, nsLabels
	controllers := slices.Collect(maps.Values(e.controllers))
	e.mu.Unlock()
	if prev == nil {
		return // the first read: every object is reconciled as it enters the cache
	}
	for ns, l := range nsLabels {
		if old, seen := prev[ns]; seen && !maps.Equal(old, l) {
			e.log.Info("namespace labels changed (project binding, sandbox class access); reconciling its objects", "namespace", ns)
			for _, c := range controllers {
				c.enqueueNamespace(ns)
			}
		}
	}
}

// namespaceLabels returns the labels of namespace as last read.
func (e *Engine) namespaceLabels(namespace string) map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.nsLabels[namespace]
}

// projectBindings returns the bindings last read (never nil once the engine runs).
func (e *Engine) projectBindings() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bindings == nil {
		return map[string]string{}
	}
	return e.bindings
}

// projectNotAllowed is the outcome of an object that names a project its namespace may not act
// in: Ready=False ProjectNotAllowed and no call to evalsid. It is not Stalled, since a binding made
// later fixes it without a new spec. A deleted object lets its finalizer go without a call: the
// operator had no authority to act in that project, so nothing was made there in its name.
func (e *Engine) projectNotAllowed(ctx context.Context, k *kind, obj *unstructured.Unstructured, err error) (Outcome, error) {
	if obj.GetDeletionTimestamp() != nil {
		if k.finalizer == "" {
			return Outcome{}, nil
		}
		return Outcome{}, e.setFinalizer(ctx, k, obj, k.finalizer, false)
	}
	return Outcome{Status: &Status{Fields: statusFields(obj), Conditions: []Condition{
		Ready(false, evalsi.ReasonProjectNotAllowed, err.Error()),
	}}}, nil
}

// enqueueNamespace adds every object of namespace in the cache.
func (c *controller) enqueueNamespace(namespace string) {
	objs, err := c.inf.shared.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		c.e.log.Error("listing a namespace's objects", "controller", c.k.controller, "err", err)
		return
	}
	for _, o := range objs {
		c.enqueue(o)
	}
}
