package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"evals.si/operator/shard"
)

// shardHolder holds a fair share of an operator's shards for one replica: ceil(shards / live
// replicas). Each held shard has its own Lease, renewed by a leader elector, and runs an engine
// while it is held. A replica over its share (another replica joined) drains a shard: it stops
// the shard's engine, and only then releases its Lease, so that an object is never written by
// two replicas at once. A replica under its share takes shards whose Lease is free: released, or
// expired because its holder died. Replicas count each other by the member slots they hold
// (MemberLease). Every Lease has a name known in advance, so that RBAC can name them all.
type shardHolder struct {
	kube      kubernetes.Interface
	log       *slog.Logger
	namespace string
	name      string
	count     int
	id        string
	// member is this replica's member slot ("" when it holds none, or the operator does not
	// shard).
	member string
	// run reconciles a shard until its context ends.
	run  func(context.Context, shard.Shard) error
	errc chan error
	// onHeld is told how many shards are held whenever that changes.
	onHeld func(n int)

	// conflict is the Lease of replicas with another number of shards last seen held ("").
	conflict string
	// seen is each Lease's version as this replica first saw it: a holder whose Lease has not
	// changed for its duration of this replica's own clock is gone (observedHolder).
	seen map[string]observation

	mu     sync.Mutex
	tries  map[int]*shardTry
	byHash map[int]uint64
}

// shardTry is an elector of one shard's Lease and, while it leads, the shard's engine.
type shardTry struct {
	shard.Shard
	// stopElector ends the elector, which then releases the Lease if it holds it.
	stopElector context.CancelFunc
	elector     chan struct{}
	mu          sync.Mutex
	leading     bool
	stopEngine  context.CancelFunc
	engine      chan struct{}
}

func (t *shardTry) isLeading() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leading
}

// holdShards holds shards for this replica (identity id) until ctx ends or an engine fails.
func holdShards(ctx context.Context, h *shardHolder) error {
	h.tries, h.byHash, h.errc, h.seen = map[int]*shardTry{}, map[int]uint64{}, make(chan error, h.count), map[string]observation{}
	for i := range h.count {
		// Each replica prefers the shards that hash best with its identity (rendezvous hashing),
		// so that replicas starting together try different shards first.
		f := fnv.New64a()
		fmt.Fprintf(f, "%s/%d", h.id, i)
		h.byHash[i] = f.Sum64()
	}
	defer h.leave()
	defer h.stopAll()
	t := time.NewTicker(retryPeriod)
	defer t.Stop()
	for {
		h.rebalance(ctx)
		select {
		case <-ctx.Done():
			return nil
		case err := <-h.errc:
			return err
		case <-t.C:
		}
	}
}

// rebalance renews this replica's membership, then drains the shards over its fair share, lets
// go of tries on Leases that another replica holds, and tries free shards up to its share.
func (h *shardHolder) rebalance(ctx context.Context) {
	now := time.Now()
	members := 1
	if h.count > 1 {
		n, err := h.renewMember(ctx, now)
		if err != nil {
			h.log.Warn("renewing the member Lease", "err", err)
			return
		}
		if h.member == "" {
			// Every slot is held: as many replicas as shards run, and this one stands by.
			h.drain(0, n)
			return
		}
		members = max(n, 1)
	}
	fair := (h.count + members - 1) / members
	holders, conflict, err := h.holders(ctx, now)
	if err != nil {
		h.log.Warn("reading the shards' Leases", "err", err)
		return
	}
	if conflict != h.conflict {
		if conflict != "" {
			h.log.Error("replicas with another number of shards reconcile: this one reconciles nothing until they stop (give every replica the same --shards)", "shards", h.count, "other", conflict)
		} else {
			h.log.Info("no replica with another number of shards reconciles any more", "shards", h.count)
		}
		h.conflict = conflict
	}
	if conflict != "" {
		// Their shards are other slices of the same objects: taking any would make two writers.
		h.drain(0, members)
		return
	}
	leading := h.drain(fair, members)
	tries := 0
	for _, t := range h.current() {
		if t.isLeading() {
			continue
		}
		if holder := holders[t.Index]; holder != "" && holder != h.id {
			// Another replica took it first: try a free one instead.
			h.drop(t)
			continue
		}
		tries++
	}
	var free []int
	h.mu.Lock()
	for i := range h.count {
		if _, ok := h.tries[i]; !ok && holders[i] == "" {
			free = append(free, i)
		}
	}
	h.mu.Unlock()
	// Most preferred first.
	slices.SortFunc(free, func(a, b int) int { return cmp.Compare(h.byHash[b], h.byHash[a]) })
	want := max(fair-leading-tries, 0)
	for _, i := range free[:min(want, len(free))] {
		h.try(ctx, shard.Shard{Index: i, Count: h.count})
	}
}

// drain drops the least preferred shards this replica leads beyond fair (another replica
// joined), and returns how many it still leads.
func (h *shardHolder) drain(fair, members int) int {
	var leading []*shardTry
	for _, t := range h.current() {
		if t.isLeading() {
			leading = append(leading, t)
		}
	}
	slices.SortFunc(leading, func(a, b *shardTry) int { return cmp.Compare(h.byHash[a.Index], h.byHash[b.Index]) })
	for len(leading) > fair {
		h.log.Info("draining a shard: another replica joined", "shard", leading[0].String(), "replicas", members, "fairShare", fair)
		h.drop(leading[0])
		leading = leading[1:]
	}
	return len(leading)
}

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
	if taken, err := h.take(ctx, name); err != nil || !taken {
		if err != nil {
			h.log.Warn("taking a shard's Lease", "shard", s.String(), "err", err)
		}
		return
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta: metav1.ObjectMeta{Namespace: h.namespace, Name: name}, Client: h.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: h.id}, Labels: h.labels(),
	}
	// The elector's context is not ctx: on shutdown the engine stops first, then the Lease is
	// released (stopAll), never the other way round.
	ectx, stop := context.WithCancel(context.WithoutCancel(ctx))
	t := &shardTry{Shard: s, stopElector: stop, elector: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Name: name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { h.lead(lctx, t) },
			OnStoppedLeading: func() {
				t.mu.Lock()
				stopEngine, engine := t.stopEngine, t.engine
				t.leading = false
				t.mu.Unlock()
				if stopEngine != nil {
					stopEngine()
					<-engine
				}
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

// lead runs s's engine while t's elector leads (lctx).
func (h *shardHolder) lead(lctx context.Context, t *shardTry) {
	ctx, stop := context.WithCancel(lctx)
	done := make(chan struct{})
	t.mu.Lock()
	t.leading, t.stopEngine, t.engine = true, stop, done
	t.mu.Unlock()
	h.log.Info("holding a shard", "shard", t.String(), "lease", ShardLease(h.name, t.Shard), "identity", h.id)
	h.heldChanged()
	defer close(done)
	if err := h.run(ctx, t.Shard); err != nil {
		h.errc <- fmt.Errorf("shard %s: %w", t.Shard, err)
	}
}

// drop stops t's engine, waits for it to end, ends its elector, and only then releases the
// Lease (the elector's own release on cancel would not wait for the engine).
func (h *shardHolder) drop(t *shardTry) {
	t.mu.Lock()
	stopEngine, engine := t.stopEngine, t.engine
	t.mu.Unlock()
	if stopEngine != nil {
		stopEngine()
		<-engine
	}
	t.stopElector()
	<-t.elector
	if err := h.release(ShardLease(h.name, t.Shard)); err != nil {
		h.log.Warn("releasing a shard's Lease; it expires instead", "shard", t.String(), "err", err)
		return
	}
	if stopEngine != nil {
		h.log.Info("released a shard", "shard", t.String(), "identity", h.id)
	}
}

// stopAll drops every shard: engines first, then Leases.
func (h *shardHolder) stopAll() {
	var wg sync.WaitGroup
	for _, t := range h.current() {
		wg.Go(func() { h.drop(t) })
	}
	wg.Wait()
}

func (h *shardHolder) heldChanged() {
	if h.onHeld == nil {
		return
	}
	n := 0
	h.mu.Lock()
	for _, t := range h.tries {
		if t.isLeading() {
			n++
		}
	}
	h.mu.Unlock()
	h.onHeld(n)
}

// errNoElection is why an operator that shards must elect.
var errNoElection = errors.New("sharding needs leader election: --shards above 1 with --leader-elect=false")
