package process

// A shard's try: the elector of its Lease and, while it leads, its engine.

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"evals.si/operator/shard"
)

// current returns the shards this replica tries or leads.
func (h *shardHolder) current() []*shardTry {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*shardTry, 0, len(h.tries))
	for _, t := range h.tries {
		out = append(out, t)
	}
	return out
}

// try takes s's Lease, which rebalance found free, and starts an elector that renews it; while
// it leads, s's engine runs. The elector does not take the Lease itself: it would wait a Lease
// duration from its own first sight of it, after this replica has already waited one.
func (h *shardHolder) try(ctx context.Context, s shard.Shard) {
	name := ShardLease(h.name, s)
	if taken, err := h.take(ctx, name, h.timings.shardLease()); err != nil || !taken {
		if err != nil {
			h.log.Warn("taking a shard's Lease", "shard", s.String(), "err", err)
		}
		return
	}
	lock := &tenureLock{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta: metav1.ObjectMeta{Namespace: h.namespace, Name: name}, Client: h.kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: h.id}, Labels: h.labels(),
		},
		tenure: h.tenure(s.Index), deadline: h.timings.RenewDeadline,
	}
	// The elector's context is not ctx: on shutdown the engine stops first, then the Lease is
	// released (stopAll), never the other way round.
	ectx, stop := context.WithCancel(context.WithoutCancel(ctx))
	t := &shardTry{Shard: s, stopElector: stop, elector: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: h.timings.shardLease(), RenewDeadline: h.timings.RenewDeadline, RetryPeriod: h.timings.RetryPeriod,
		Name: name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { h.lead(lctx, t) },
			OnStoppedLeading: func() {
				t.mu.Lock()
				engine := t.engine
				t.leading = false
				t.mu.Unlock()
				engine.halt()
				if ectx.Err() == nil {
					h.log.Warn("lost a shard's Lease; its engine stopped", "shard", s.String(), "lease", name)
				}
			},
		},
	})
	if err != nil {
		h.errc <- fmt.Errorf("configuring the elector of shard %s: %w", s, err)
		return
	}
	h.mu.Lock()
	h.tries[s.Index] = t
	h.mu.Unlock()
	go func() {
		defer close(t.elector)
		le.Run(ectx)
		// Lost or released: the shard is free for this replica to try again.
		h.mu.Lock()
		if h.tries[s.Index] == t {
			delete(h.tries, s.Index)
		}
		h.mu.Unlock()
		h.heldChanged()
	}()
}

// lead runs s's engine while t's elector leads (lctx): the warm one when this replica warmed s,
// which may now write, else a new one.
func (h *shardHolder) lead(lctx context.Context, t *shardTry) {
	h.mu.Lock()
	e, warm := h.warm[t.Index]
	delete(h.warm, t.Index)
	h.mu.Unlock()
	if warm {
		close(e.writable)
	} else {
		e = h.startEngine(lctx, t.Shard, nil)
	}
	t.mu.Lock()
	t.leading, t.engine = true, e
	t.mu.Unlock()
	h.moves.count(t.Shard, took(warm))
	h.log.Info("holding a shard", "shard", t.String(), "lease", ShardLease(h.name, t.Shard), "identity", h.id, "warm", warm)
	h.heldChanged()
	select {
	case <-lctx.Done():
		e.halt() // a warm engine runs under the holder's context, not lctx
	case <-e.done:
	}
	if e.err != nil {
		h.errc <- fmt.Errorf("shard %s: %w", t.Shard, e.err)
	}
}

// drop stops t's engine, waits for it to end, ends its elector, and only then releases the
// Lease (the elector's own release on cancel would not wait for the engine).
func (h *shardHolder) drop(t *shardTry) {
	t.mu.Lock()
	engine := t.engine
	t.mu.Unlock()
	engine.halt()
	t.stopElector()
	<-t.elector
	released, err := h.release(ShardLease(h.name, t.Shard))
	if err != nil {
		h.log.Warn("releasing a shard's Lease; it expires instead", "shard", t.String(), "err", err)
		return
	}
	switch {
	case engine == nil:
	case released:
		h.log.Info("released a shard", "shard", t.String(), "identity", h.id)
	default:
		h.log.Warn("stopped a shard whose Lease another replica holds", "shard", t.String(), "identity", h.id)
	}
}
