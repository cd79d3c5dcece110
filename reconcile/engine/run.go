package engine

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"evals.si/operator/reconcile/engine/cached"
)

// Run starts the controllers whose resources are served and keeps looking for resources that
// appear later, until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	ctx = withWritable(ctx, e.cfg.Writable)
	var leaveEvents func()
	e.recorder, leaveEvents = e.events.join(ctx, e.cfg.Shard, e.kube)
	defer leaveEvents()
	e.gate = cached.NewAPIGate(ctx, func(ctx context.Context) error {
		return e.rest.Get().AbsPath("/readyz").Do(ctx).Error()
	}, e.apiServerBack, e.metrics.unreachableCalls)
	if t := e.cfg.Tenancy; t != nil {
		defer t.OnChange(e.enqueueNamespace)()
	}

	var wg sync.WaitGroup
	defer func() {
		e.stopInformers()
		wg.Wait()
		// Its shard's series go with it: its holder counts them from now on.
		e.metrics.forgetShard(e.cfg.Shard.String())
	}()
	wg.Add(1)
	// While objects wait on an external API, one is retried every canaryInterval (waiters.go).
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, func(context.Context) { e.waiters.retryOne() }, canaryInterval)
	}()
	t := time.NewTicker(e.cfg.DiscoveryInterval)
	defer t.Stop()
	for {
		e.discover(ctx, &wg)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
