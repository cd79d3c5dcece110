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
// (MemberLease), and a replica that has just taken its slot takes shards a RetryPeriod later, so
// that replicas started together count each other first and none takes a shard only to hand it
// over. With more replicas than shards, the first replica without a slot holds the standby
// Lease (StandbyLease): when a member is gone, every replica counts it in, so that it, not
// another member, takes the gone member's shards, and its slot once that runs out. Every Lease
// has a name known in advance, so that RBAC can name them all.
//
// While a late holder's Lease runs out, the replicas that will take its shards warm them: they
// start the shards' engines without writes (engine.Config.Writable), which list, watch and
// reconcile the shards' objects and hold back the reconciles that would write, so that the one
// that takes a Lease writes at once what needs writing instead of listing and reading every
// object then. The others stop theirs when they see the Lease taken (warm.go).
type shardHolder struct {
	kube      kubernetes.Interface
	log       *slog.Logger
	namespace string
	name      string
	count     int
	id        string
	timings   LeaseTimings
	// member is this replica's member slot ("" when it holds none, or the operator does not
	// shard); standby whether it holds the standby Lease instead, and standbyPeer the other
	// replica that holds it ("" for none).
	member      string
	standby     bool
	standbyPeer string
	// standbyForbidden is whether this replica's RBAC refused it the standby Lease, last it read
	// it: warned once each time it turns true.
	standbyForbidden bool
	// listForbidden is whether this replica's RBAC refused it the List of Leases, last it
	// listed them, so that it warns once (otherCountShard).
	listForbidden bool
	// run reconciles a shard until its context ends; with writable set, only once it is closed.
	run  func(ctx context.Context, s shard.Shard, writable <-chan struct{}) error
	errc chan error
	// onHeld is told how many shards are held whenever that changes.
	onHeld func(n int)

	// conflict is the Lease of replicas with another number of shards last seen held ("").
	conflict string
	// seen is each Lease's version as this replica first saw it: a holder whose Lease has not
	// changed for its duration of this replica's own clock is gone (observe).
	seen map[string]observation
	// expires is when the first Lease of a late holder runs out (zero: none is late): rebalance
	// runs again then, not up to a RetryPeriod later.
	expires time.Time

	mu     sync.Mutex
	tries  map[int]*shardTry
	byHash map[int]uint64
	// tenures are how long this replica may still write each shard's objects, extended by each
	// renewal of the shard's Lease (tenureLock), and carried by the contexts of its engines.
	tenures map[int]*shard.Tenure
	// warm are the engines of the shards this replica warms, by index, until it takes their
	// Leases (lead adopts them) or sees them taken by another.
	warm map[int]*shardEngine
	// peers are the other replicas counted live (countMembers); warmer is, for each shard of a
	// late holder, the replica that warms it and takes it first (assignLate), and freeSince when
	// this replica first saw that shard's Lease free. Only rebalance uses them.
	peers     []string
	warmer    map[int]string
	freeSince map[int]time.Time
	// rounds are how long this replica's last rounds (rebalance) took, newest first: leftToWarmer
	// waits longer while they are slow.
	rounds [4]time.Duration
}

// shardEngine is a shard's engine running in its own goroutine.
type shardEngine struct {
	// writable, when not nil, is closed to let a warm engine write.
	writable chan struct{}
	stop     context.CancelFunc
	// done is closed when the engine's run returned, with err.
	done chan struct{}
	err  error
}

// startEngine starts the engine of s under ctx; with writable, a warm one that writes nothing
// until it is closed. Its writes are sent only within s's tenure.
func (h *shardHolder) startEngine(ctx context.Context, s shard.Shard, writable chan struct{}) *shardEngine {
	ctx, stop := context.WithCancel(shard.WithTenure(ctx, h.tenure(s.Index)))
	e := &shardEngine{writable: writable, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		e.err = h.run(ctx, s, writable)
	}()
	return e
}

// halt stops the engine and waits until it ended; a nil engine (none started) is a no-op.
func (e *shardEngine) halt() {
	if e == nil {
		return
	}
	e.stop()
	<-e.done
}

// tenure returns shard i's tenure, one for the holder's life.
func (h *shardHolder) tenure(i int) *shard.Tenure {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.tenures[i]
	if !ok {
		t = &shard.Tenure{}
		h.tenures[i] = t
	}
	return t
}

// shardTry is an elector of one shard's Lease and, while it leads, the shard's engine.
type shardTry struct {
	shard.Shard
	// stopElector ends the elector, which then releases the Lease if it holds it.
	stopElector context.CancelFunc
	elector     chan struct{}
	mu          sync.Mutex
	leading     bool
	// engine runs while the elector leads (nil before).
	engine *shardEngine
}

func (t *shardTry) isLeading() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leading
}

// holdShards holds shards for this replica (identity id) until ctx ends or an engine fails.
func holdShards(ctx context.Context, h *shardHolder) error {
	h.tries, h.warm, h.byHash, h.errc, h.seen = map[int]*shardTry{}, map[int]*shardEngine{}, map[int]uint64{}, make(chan error, h.count), map[string]observation{}
	h.warmer, h.freeSince, h.tenures = map[int]string{}, map[int]time.Time{}, map[int]*shard.Tenure{}
	for i := range h.count {
		// Replicas starting together try different shards first.
		h.byHash[i] = rendezvous(h.id, i)
	}
	defer h.leave()
	defer h.stopAll()
	t := time.NewTimer(h.timings.RetryPeriod)
	defer t.Stop()
	for {
		h.expires = time.Time{}
		start := time.Now()
		h.rebalance(ctx)
		copy(h.rounds[1:], h.rounds[:])
		h.rounds[0] = time.Since(start)
		wait := h.timings.RetryPeriod
		if !h.expires.IsZero() {
			// Just past it, so that the Lease is judged run out.
			wait = min(wait, max(time.Until(h.expires)+10*time.Millisecond, 0))
		}
		t.Reset(wait)
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
// go of tries on Leases that another replica holds, tries free shards up to its share, and warms
// the shards of late holders that it would take.
func (h *shardHolder) rebalance(ctx context.Context) {
	now := time.Now()
	n := 1                  // the replicas holding member slots, this one among them if it holds one
	var others []shardLease // the other replicas' member slots
	if h.count > 1 {
		slots, joined, err := h.renewMember(ctx, now)
		if err != nil {
			h.log.Warn("renewing this replica's membership (its member slot and the standby Lease)", "err", err)
			return
		}
		others = slots
		n = len(others)
		if h.member != "" {
			n++
		}
		if joined && n < h.count {
			// Replicas started beside this one may not hold their slots yet: counted now, this
			// one would take every shard, then drain all but its share once they are. It takes
			// shards from the next round, a RetryPeriod later.
			return
		}
		if h.member == "" && !h.standby {
			// Every slot is held and another replica stands by: this one waits, unseen, holding
			// and warming nothing.
			h.standAside(ctx, n, "every member slot is held and another replica stands by")
			return
		}
	}
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
		h.standAside(ctx, n, "replicas with another number of shards reconcile")
		return
	}
	// The replicas that are gone are counted out: the share of each one left is larger at once,
	// not only once their member slots run out, which can be a round after their shards' Leases
	// (drained then, a shard taken would go back and forth). A replica that stands by is counted
	// in for a slot that is vacant: it takes a gone member's shards (and its slot once it runs
	// out), and the others leave them to it.
	peers, gone := countMembers(others, holders)
	members, idle, withPeer := h.membership(n-gone, gone)
	if idle {
		// It stands by and no member is gone: the others warm what a late member holds.
		h.standAside(ctx, n, "this replica stands by and no member is gone")
		return
	}
	if withPeer {
		peers = append(peers, h.standbyPeer)
	}
	h.peers = peers
	share := (h.count + members - 1) / members
	h.dropTaken(holders)
	leading := h.drain(share, members, "more replicas share the shards")
	tries := 0
	for _, t := range h.current() {
		if !t.isLeading() {
			tries++
		}
	}
	h.assignLate(holders, share, now)
	var free []int
	h.mu.Lock()
	for i := range h.count {
		if _, ok := h.tries[i]; !ok && holders[i].holder == "" && !h.leftToWarmer(i, now) {
			free = append(free, i)
		}
	}
	h.mu.Unlock()
	h.byPreference(free) // the warmed first
	want := max(share-leading-tries, 0)
	for _, i := range free[:min(want, len(free))] {
		h.try(ctx, shard.Shard{Index: i, Count: h.count})
	}
	h.warmLate(ctx, holders)
}

// standAside drains every shard this replica holds and stops the engines it warms: it stands
// by, or replicas of another number of shards reconcile (why, for the log). n is the replicas
// counted, for the log too.
func (h *shardHolder) standAside(ctx context.Context, n int, why string) {
	h.drain(0, n, why)
	h.warmLate(ctx, nil)
}

// rendezvous is the rendezvous hash of replica id and shard i: each replica prefers the shards
// that hash best with its identity.
func rendezvous(id string, i int) uint64 {
	f := fnv.New64a()
	fmt.Fprintf(f, "%s/%d", id, i)
	return f.Sum64()
}

// byPreference sorts shards most preferred first: those this replica warms, then by its
// rendezvous hash.
func (h *shardHolder) byPreference(shards []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	slices.SortFunc(shards, func(a, b int) int {
		_, wa := h.warm[a]
		_, wb := h.warm[b]
		if wa != wb {
			if wa {
				return -1
			}
			return 1
		}
		return cmp.Compare(h.byHash[b], h.byHash[a])
	})
}

// dropTaken drops the shards this replica tries or leads whose Lease another replica holds: it
// took a free one first (this replica tries another instead), or took one this replica led,
// which only a replica whose renewals stopped for a Lease duration sees (a process stopped and
// resumed). Its elector would notice that only once its renewals have failed for a renew
// deadline; the shard's tenure has kept the engine from writing since.
func (h *shardHolder) dropTaken(holders map[int]shardLease) {
	for _, t := range h.current() {
		if holder := holders[t.Index].holder; holder != "" && holder != h.id {
			h.drop(t)
		}
	}
}

// drain drops the least preferred shards this replica leads beyond fair (why: more replicas
// share the shards, or standAside's reason), and returns how many it still leads.
func (h *shardHolder) drain(fair, members int, why string) int {
	var leading []*shardTry
	for _, t := range h.current() {
		if t.isLeading() {
			leading = append(leading, t)
		}
	}
	slices.SortFunc(leading, func(a, b *shardTry) int { return cmp.Compare(h.byHash[a.Index], h.byHash[b.Index]) })
	for len(leading) > fair {
		h.log.Info("draining a shard", "why", why, "shard", leading[0].String(), "replicas", members, "fairShare", fair)
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
		Lock: lock, LeaseDuration: h.timings.LeaseDuration, RenewDeadline: h.timings.RenewDeadline, RetryPeriod: h.timings.RetryPeriod,
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

// stopAll drops every shard: engines first, then Leases; and stops the warm engines.
func (h *shardHolder) stopAll() {
	var wg sync.WaitGroup
	for _, t := range h.current() {
		wg.Go(func() { h.drop(t) })
	}
	h.mu.Lock()
	for i, e := range h.warm {
		delete(h.warm, i)
		wg.Go(e.halt)
	}
	h.mu.Unlock()
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
