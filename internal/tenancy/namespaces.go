// Package tenancy reads what decides where an identity or an object may act: the Namespaces, with
// the project each is bound to and the labels SandboxClasses select by. The operator, the webhook
// and evalsid read bindings through it, so they agree on one rule (evalsi.ProjectOf) applied to
// one view of the cluster.
package tenancy

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
)

// PollInterval is how often the one Namespace of a namespaced reader is read again.
const PollInterval = 10 * time.Second

// Namespaces holds the labels of the cluster's Namespaces, or of one.
type Namespaces struct {
	mu     sync.Mutex
	labels map[string]map[string]string // by namespace
	// boundTo are the namespaces bound by label to each project.
	boundTo map[string]map[string]bool
	// synced says that the first read is complete; nothing is known before.
	synced bool
	// listeners are told of each namespace that appears, or whose labels change, after the first
	// read; by the order they were added in.
	listeners map[int]func(namespace string)
	added     int
}

// NewNamespaces returns Namespaces that know nothing until Watch has read them.
func NewNamespaces() *Namespaces {
	return &Namespaces{labels: map[string]map[string]string{}, boundTo: map[string]map[string]bool{}, listeners: map[int]func(string){}}
}

// WatchNamespaces is NewNamespaces and Watch.
func WatchNamespaces(ctx context.Context, kube kubernetes.Interface, only string) *Namespaces {
	n := NewNamespaces()
	n.Watch(ctx, kube, only)
	return n
}

// Watch reads the labels of the cluster's Namespaces until ctx ends, from a watch, so that a
// binding made on a Namespace is known within moments without a read per question. Watched again
// after an earlier watch ended, it forgets, once synced, the namespaces its first list lacks. With only set
// it reads that one Namespace, by a GET every PollInterval: a namespaced component (the evalsi
// chart's operator and evalsid) may get its own Namespace with a Role in it, while a list or
// watch of Namespaces, even of one by name, needs a cluster role.
func (n *Namespaces) Watch(ctx context.Context, kube kubernetes.Interface, only string) {
	if only != "" {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { n.poll(ctx, kube, only) }, PollInterval)
		return
	}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 30*time.Minute)
	inf := factory.Core().V1().Namespaces().Informer()
	set := func(o any, synced bool) {
		if ns, ok := o.(*corev1.Namespace); ok {
			n.set(ns.Name, ns.Labels, synced)
		}
	}
	// The handler runs behind the informer's store, so the first read is done when the handler
	// has seen the first list (reg.HasSynced), not when the store has (inf.HasSynced): else a
	// namespace of that list could be unknown, then told of as new.
	var reg cache.ResourceEventHandlerRegistration
	reg, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(o any, initial bool) { set(o, !initial) },
		UpdateFunc: func(_, o any) { set(o, reg.HasSynced()) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if ns, ok := o.(*corev1.Namespace); ok {
				n.remove(ns.Name)
			}
		},
	})
	factory.Start(ctx.Done())
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			return
		}
		listed := map[string]bool{}
		for _, name := range inf.GetStore().ListKeys() {
			listed[name] = true
		}
		for name := range n.known() {
			if !listed[name] {
				n.remove(name)
			}
		}
		n.mu.Lock()
		n.synced = true
		n.mu.Unlock()
	}()
}

// WaitForSync waits until the first read is done, or ctx ends; it reports whether it is done.
func (n *Namespaces) WaitForSync(ctx context.Context) bool {
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return n.HasSynced(), nil
	}) == nil
}

// poll reads the one Namespace; one that does not exist is known to have no labels.
func (n *Namespaces) poll(ctx context.Context, kube kubernetes.Interface, name string) {
	ns, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		n.remove(name)
	case err == nil:
		n.set(name, ns.Labels, n.HasSynced())
	default:
		return // another error keeps what was read last (at first: nothing, so nothing is known)
	}
	n.mu.Lock()
	n.synced = true
	n.mu.Unlock()
}

// set records namespace's labels; synced says whether the first read is complete, so that
// listeners hear only of changes after it. A namespace that appears after it is a change too:
// its objects may have been judged before it was known (the watches of Namespaces and of the
// objects in them deliver in no common order), as acting in the project named like it.
func (n *Namespaces) set(namespace string, labels map[string]string, synced bool) {
	n.mu.Lock()
	old, seen := n.labels[namespace]
	n.labels[namespace] = labels
	n.unbind(namespace, old[evalsi.LabelProject])
	n.bind(namespace, labels[evalsi.LabelProject])
	changed := !seen || !maps.Equal(old, labels)
	listeners := make([]func(string), 0, len(n.listeners))
	for _, k := range slices.Sorted(maps.Keys(n.listeners)) {
		listeners = append(listeners, n.listeners[k])
	}
	n.mu.Unlock()
	if !changed || !synced {
		return
	}
	// A binding made or moved also changes where the namespaces named like the projects act.
	for _, name := range affected(namespace, old[evalsi.LabelProject], labels[evalsi.LabelProject]) {
		for _, fn := range listeners {
			fn(name)
		}
	}
}

// affected are the namespaces whose project a change of namespace's binding from old to new may
// change: namespace itself, and those named like either project.
func affected(namespace, old, new string) []string {
	out := []string{namespace}
	for _, p := range []string{old, new} {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func (n *Namespaces) bind(namespace, project string) {
	if project == "" {
		return
	}
	if n.boundTo[project] == nil {
		n.boundTo[project] = map[string]bool{}
	}
	n.boundTo[project][namespace] = true
}

func (n *Namespaces) unbind(namespace, project string) {
	delete(n.boundTo[project], namespace)
	if len(n.boundTo[project]) == 0 {
		delete(n.boundTo, project)
	}
}

func (n *Namespaces) remove(namespace string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unbind(namespace, n.labels[namespace][evalsi.LabelProject])
	delete(n.labels, namespace)
}

// HasSynced reports whether the first read is done.
func (n *Namespaces) HasSynced() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.synced
}

// OnLabelsChanged calls fn with the name of each Namespace that appears or whose labels change
// (a project binding made or moved, a label a SandboxClass selects by), until the returned
// function is called.
func (n *Namespaces) OnLabelsChanged(fn func(namespace string)) (remove func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.added
	n.added++
	n.listeners[k] = fn
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.listeners, k)
	}
}

// known returns the namespaces read so far.
func (n *Namespaces) known() map[string]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]bool, len(n.labels))
	for name := range n.labels {
		out[name] = true
	}
	return out
}

// Claimed reports whether a Namespace other than the one named project is bound to project by
// label, so that the namespace named like it acts in no project without the label itself
// (evalsi.ProjectOf). A namespaced reader, which reads only its own Namespace, sees no other
// binding: the platform's evalsid, which reads them all, holds the rule for it.
func (n *Namespaces) Claimed(project string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ns := range n.boundTo[project] {
		if ns != project {
			return true
		}
	}
	return false
}

// Bindings returns what render.Project needs to know of the bindings to place an object of
// namespace: the namespace's own binding, and one namespace bound to the project named like it
// when it has none. False when the namespace is not known.
func (n *Namespaces) Bindings(namespace string) (map[string]string, bool) {
	labels, ok := n.Labels(namespace)
	if !ok {
		return nil, false
	}
	if p := labels[evalsi.LabelProject]; p != "" {
		return map[string]string{namespace: p}, true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for ns := range n.boundTo[namespace] {
		if ns != namespace {
			return map[string]string{ns: namespace}, true
		}
	}
	return map[string]string{}, true
}

// Labels returns the labels of namespace, and false when the namespace is not known (not read
// yet, or no such Namespace).
func (n *Namespaces) Labels(namespace string) (map[string]string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.synced {
		return nil, false
	}
	l, ok := n.labels[namespace]
	return l, ok
}
