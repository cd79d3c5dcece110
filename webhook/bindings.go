package webhook

import (
	"context"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/evalsi"
)

// watchBindings caches the Namespaces and answers project bindings from the cache: the project a
// namespace is bound to by its evals.si/project label. Until the cache has synced, and for a
// namespace it has not seen yet, a binding is not known and the object's label is taken as
// given: the operator refuses it again (ProjectNotAllowed) and calls nothing, so admission only
// gives the earlier, clearer answer. It also returns whether the cache has synced.
func watchBindings(ctx context.Context, kube kubernetes.Interface) (Bindings, func() bool) {
	factory := informers.NewSharedInformerFactory(kube, 30*time.Minute)
	namespaces := factory.Core().V1().Namespaces()
	lister, synced := namespaces.Lister(), namespaces.Informer().HasSynced
	factory.Start(ctx.Done())
	return func(namespace string) (string, bool) {
		if !synced() {
			return "", false
		}
		n, err := lister.Get(namespace)
		if err != nil {
			return "", false
		}
		return n.Labels[evalsi.LabelProject], true
	}, synced
}
