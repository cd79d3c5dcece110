package cached

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/shard"
)

// ShardListWatch lists and watches, through lw, only the owners of s: it asks the API server for
// them (shardSelector, served where the ShardedListAndWatch feature gate is on; an API server
// without it answers every owner), and drops the others before they reach the cache, so that a
// replica holds only its shard's owners either way. An owner's UID never changes: it never moves
// between shards.
func ShardListWatch(lw cache.ListerWatcherWithContext, s shard.Shard) cache.ListerWatcherWithContext {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.ShardSelector = s.Selector()
			obj, err := lw.ListWithContext(ctx, options)
			if list, ok := obj.(*cachedList[*Owner]); ok {
				list.Items = slices.DeleteFunc(list.Items, func(o *Owner) bool { return !s.Contains(string(o.GetUID())) })
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
				o, ok := ev.Object.(*Owner)
				return ev, !ok || s.Contains(string(o.GetUID()))
			}), nil
		},
	}
}
