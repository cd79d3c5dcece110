// Package tenancy reads what decides where an identity or an object may act: the Namespaces, with
// the project each is bound to and the labels SandboxClasses select by. The operator, the webhook
// and evalsid read bindings through it, so they agree on one rule (evalsi.ProjectOf) applied to
// one view of the cluster.
package tenancy

import (
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// PollInterval is how often the one Namespace of a namespaced reader is read again.
const PollInterval = 10 * time.Second

// Namespaces holds the labels of the cluster's Namespaces, or of one.
type Namespaces struct {
	mu     sync.Mutex
	labels map[string]map[string]string // by namespace
	// synced says that the first read is complete; nothing is known before.
	synced bool
	// listeners are told of each namespace that appears, or whose labels change, after the first
	// read.
	listeners []func(namespace string)
}

// NewNamespaces returns Namespaces that know nothing until Watch has read them.
func NewNamespaces() *Namespaces {
	return &Namespaces{labels: map[string]map[string]string{}}
}

// WatchNamespaces is NewNamespaces and Watch.
func WatchNamespaces(ctx context.Context, kube kubernetes.Interface, only string) *Namespaces {
	n := NewNamespaces()
	n.Watch(ctx, kube, only)
	return n
}

// Watch reads the labels of the cluster's Namespaces until ctx ends, from a watch, so that a
// binding made on a Namespace is known within moments without a read per question. With only set
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
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			n.mu.Lock()
			n.synced = true
			n.mu.Unlock()
		}
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
	changed := !seen || !maps.Equal(old, labels)
	listeners := append([]func(string){}, n.listeners...)
	n.mu.Unlock()
	if !changed || !synced {
		return
	}
	for _, fn := range listeners {
		fn(namespace)
	}
}

func (n *Namespaces) remove(namespace string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.labels, namespace)
}

// HasSynced reports whether the first read is done.
func (n *Namespaces) HasSynced() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.synced
}

// OnLabelsChanged calls fn with the name of each Namespace that appears or whose labels change
// (a project binding made or moved, a label a SandboxClass selects by).
func (n *Namespaces) OnLabelsChanged(fn func(namespace string)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.listeners = append(n.listeners, fn)
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
