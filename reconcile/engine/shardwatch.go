package engine

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/shard"
)

// shardListWatch lists and watches, through lw, only the owners of s: it asks the API server for
// them (shardSelector, served where the ShardedListAndWatch feature gate is on; an API server
// without it answers every owner), and drops the others before they reach the cache, so that a
// replica holds only its shard's owners either way. An owner's UID never changes: it never moves
// between shards.
func shardListWatch(lw cache.ListerWatcherWithContext, s shard.Shard) cache.ListerWatcherWithContext {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.ShardSelector = s.Selector()
			obj, err := lw.ListWithContext(ctx, options)
			if list, ok := obj.(*unstructured.UnstructuredList); ok {
				kept := list.Items[:0]
				for _, item := range list.Items {
					if s.Contains(string(item.GetUID())) {
						kept = append(kept, item)
					}
				}
				list.Items = kept
			}
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.ShardSelector = s.Selector()
			w, err := lw.WatchWithContext(ctx, options)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
				if ev.Type == watch.Bookmark || ev.Type == watch.Error {
					return ev, true
				}
				u, ok := ev.Object.(*unstructured.Unstructured)
				return ev, !ok || s.Contains(string(u.GetUID()))
			}), nil
		},
	}
}
