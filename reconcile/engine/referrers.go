package engine

import (
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/reconcile/engine/cached"
)

// referrersIndex indexes the objects of a kind with Refers by what they wait on (Ref.String).
const referrersIndex = "refers"

// indexByRefers is the referrers index of a cached owner.
func indexByRefers(obj any) ([]string, error) {
	if co, ok := obj.(*cached.Owner); ok {
		return co.Refers, nil
	}
	return nil, nil
}

// wakeReferrers queues, in every running controller whose kind has Refers, the objects that wait
// on obj, an object of kind that was added, changed or deleted: a run created before its
// SandboxClass goes on when the class comes, not at its next look.
func (e *Engine) wakeReferrers(kind string, obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	ref := Ref{Kind: kind, Key: key}.String()
	e.mu.Lock()
	var referrers []*Controller
	for _, c := range e.controllers {
		if c.kind.Refers != nil && c.inf != nil {
			referrers = append(referrers, c)
		}
	}
	e.mu.Unlock()
	for _, c := range referrers {
		objs, err := c.inf.shared.GetIndexer().ByIndex(referrersIndex, ref)
		if err != nil {
			continue
		}
		for _, o := range objs {
			c.enqueue(o)
		}
	}
}
