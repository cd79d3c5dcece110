package evalsid

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/tenancy"
	"evals.si/operator/render"
)

// ErrNotKnownYet is what the directory answers until its first read of the cluster: the server
// then answers Unavailable, and the caller tries again.
var ErrNotKnownYet = errors.New("the cluster's namespaces and sandbox classes are not read yet")

// errNoNamespace is a caller whose namespace does not exist (a token outliving its namespace).
var errNoNamespace = errors.New("no such namespace")

// Cluster is the Directory of a Kubernetes cluster: Namespaces (their project bindings and
// labels) and SandboxClasses, each cached from a watch, so that a call costs no read of the API
// server, but for a SandboxClass or Namespace the cache lacks (readClass, readNamespace). Its
// credentials need get, list and watch on namespaces (or only on the one namespace it serves)
// and on sandboxclasses.
type Cluster struct {
	namespaces namespaceLabels
	classes    cache.SharedIndexInformer
	// readClass reads a SandboxClass from the API server.
	readClass func(ctx context.Context, name string) (*unstructured.Unstructured, error)
	// readNamespace reads a Namespace from the API server.
	readNamespace func(ctx context.Context, name string) (*corev1.Namespace, error)
	// only, when set, is the one namespace whose callers the server serves.
	only string
	// absent holds the namespaces the API server said do not exist, each for absentFor, so that
	// a token outliving its namespace costs a read every absentFor rather than one per call.
	absent *utilcache.LRUExpireCache
}

// absentFor is how long a namespace the API server said does not exist is believed absent.
const absentFor = 10 * time.Second

// absentKept bounds absent (the least recently used go first).
const absentKept = 1024

// namespaceLabels is the cache of Namespaces' labels (tenancy.Namespaces).
type namespaceLabels interface {
	Labels(namespace string) (map[string]string, bool)
	Claimed(project string) bool
	HasSynced() bool
}

// missReadTimeout bounds the read of a SandboxClass or Namespace the cache lacks.
const missReadTimeout = 5 * time.Second

// WatchCluster starts the watches of the cluster cfg reaches, until ctx ends. With only set,
// it reads only that Namespace, and callers from other namespaces act in no project: an evalsid
// that serves one team (the evalsi chart's) needs no cluster-wide read of namespaces.
func WatchCluster(ctx context.Context, cfg *rest.Config, only string) (*Cluster, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("a client of the API server: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("a client of the API server: %w", err)
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	classes := factory.ForResource(evalsi.SandboxClasses).Informer()
	factory.Start(ctx.Done())
	readClass := func(ctx context.Context, name string) (*unstructured.Unstructured, error) {
		return dyn.Resource(evalsi.SandboxClasses).Get(ctx, name, metav1.GetOptions{})
	}
	readNamespace := func(ctx context.Context, name string) (*corev1.Namespace, error) {
		return kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	}
	return &Cluster{namespaces: tenancy.WatchNamespaces(ctx, kube, only), classes: classes,
		readClass: readClass, readNamespace: readNamespace, only: only, absent: utilcache.NewLRUExpireCache(absentKept)}, nil
}

// Project returns the project namespace acts in.
func (c *Cluster) Project(namespace string) (string, error) {
	if c.only != "" && namespace != c.only {
		return "", fmt.Errorf("this evalsid serves namespace %s only", c.only)
	}
	if !c.namespaces.HasSynced() {
		return "", ErrNotKnownYet
	}
	labels, err := c.labels(namespace)
	if err != nil {
		return "", err
	}
	project, ok := evalsi.ProjectOf(namespace, labels, c.namespaces.Claimed(namespace))
	if !ok {
		return "", fmt.Errorf("namespace %s is not bound to a project, and other namespaces are bound to project %s by the label %s: a namespace named like a project acts in it only while no namespace is bound to it by label",
			namespace, namespace, evalsi.LabelProject)
	}
	return project, nil
}

// labels returns namespace's labels: from the cache, else from the API server, since the watch
// may not have brought a namespace made a moment ago, whose pools and operator call at once. The
// read tells such a namespace from one that does not exist (a token outliving its namespace:
// errNoNamespace); when it fails, the caller is told to try again.
func (c *Cluster) labels(namespace string) (map[string]string, error) {
	if labels, ok := c.namespaces.Labels(namespace); ok {
		return labels, nil
	}
	if _, gone := c.absent.Get(namespace); gone {
		return nil, fmt.Errorf("namespace %s: %w", namespace, errNoNamespace)
	}
	ctx, cancel := context.WithTimeout(context.Background(), missReadTimeout)
	defer cancel()
	ns, err := c.readNamespace(ctx, namespace)
	switch {
	case apierrors.IsNotFound(err):
		c.absent.Add(namespace, true, absentFor)
		return nil, fmt.Errorf("namespace %s: %w", namespace, errNoNamespace)
	case err != nil:
		return nil, fmt.Errorf("reading Namespace %s: %v: %w", namespace, err, ErrNotKnownYet)
	}
	return ns.Labels, nil
}

// MayUseClass reports whether namespace may use the SandboxClass class.
func (c *Cluster) MayUseClass(namespace, class string) (bool, error) {
	if !c.namespaces.HasSynced() || !c.classes.HasSynced() {
		return false, ErrNotKnownYet
	}
	o, exists, err := c.classes.GetStore().GetByKey(class)
	if err != nil {
		return false, err
	}
	sc, _ := o.(*unstructured.Unstructured)
	if !exists {
		// The watch may not have brought a class made a moment ago (the operator, which saw it,
		// calls at once): the API server says whether it exists, so that a run is refused for
		// good only for a class that does not.
		ctx, cancel := context.WithTimeout(context.Background(), missReadTimeout)
		defer cancel()
		sc, err = c.readClass(ctx, class)
		switch {
		case apierrors.IsNotFound(err):
			return false, fmt.Errorf("SandboxClass %s does not exist", class)
		case err != nil:
			return false, fmt.Errorf("reading SandboxClass %s: %v: %w", class, err, ErrNotKnownYet)
		}
	}
	labels, err := c.labels(namespace)
	if err != nil {
		return false, err
	}
	return render.NamespaceMayUse(sc, labels)
}

// HasSynced reports whether the first reads are done.
func (c *Cluster) HasSynced() bool { return c.namespaces.HasSynced() && c.classes.HasSynced() }
