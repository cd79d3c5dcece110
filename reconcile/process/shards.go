package process

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
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
// has a name known in advance, so that RBAC can name them all. Which shards it takes, drains and
// warms at each round is decided by package holding from what it read; this type reads and writes
// the Leases and runs the engines.
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
	// onHeld is told how many shards are held whenever that changes; moves counts what the
	// replica does with each shard.
	onHeld func(n int)
	moves  moves

	// conflict is the Lease of replicas with another number of shards last seen held ("").
	conflict string
	// seen is each Lease's version as this replica first saw it: a holder whose Lease has not
	// changed for its duration of this replica's own clock is gone (observe).
	seen map[string]observation
	// expires is when the first Lease of a late holder runs out (zero: none is late): rebalance
	// runs again then, not up to a RetryPeriod later.
	expires time.Time

	mu    sync.Mutex
	tries map[int]*shardTry
	// tenures are how long this replica may still write each shard's objects, extended by each
	// renewal of the shard's Lease (tenureLock), and carried by the contexts of its engines.
	tenures map[int]*shard.Tenure
	// warm are the engines of the shards this replica warms, by index, until it takes their
	// Leases (lead adopts them) or sees them taken by another.
	warm map[int]*shardEngine
	// peers are the other replicas counted live (holding.Count); warmer is, for each shard of a
	// late holder, the replica that warms it and takes it first (assignLate), and freeSince when
	// this replica first saw that shard's Lease free. Only rebalance uses them.
	peers     []string
	warmer    map[int]string
	freeSince map[int]time.Time
	// rounds are how long this replica's last rounds (rebalance) took, newest first: leftToWarmer
	// waits longer while they are slow.
	rounds [4]time.Duration
	// joining are the shards this replica warms to take from holders over their share
	// (handover.go), and drainWanted when it first would have drained each shard it holds back
	// for a joiner.
	joining     []int
	drainWanted map[int]time.Time
	// synced reports whether the engine of a shard has synced its caches.
	synced func(shard.Shard) bool
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

// holdShards holds shards for this replica (identity id) until ctx ends or an engine fails.
func holdShards(ctx context.Context, h *shardHolder) error {
	h.tries, h.warm, h.errc, h.seen = map[int]*shardTry{}, map[int]*shardEngine{}, make(chan error, h.count), map[string]observation{}
	h.warmer, h.freeSince, h.tenures, h.drainWanted = map[int]string{}, map[int]time.Time{}, map[int]*shard.Tenure{}, map[int]time.Time{}
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
	n := 1                     // the replicas holding member slots, this one among them if it holds one
	var others []holding.Lease // the other replicas' member slots
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
	m := holding.Count(holding.Members{Count: h.count, Member: h.member != "", Standby: h.standby, StandbyPeer: h.standbyPeer, Others: others, Leases: holders})
	if m.Idle {
		// It stands by and no member is gone: the others warm what a late member holds.
		h.standAside(ctx, n, "this replica stands by and no member is gone")
		return
	}
	h.peers = m.Peers
	share := m.Share
	h.assignLate(holders, share, now)
	r := h.round(holders, share, now)
	r.HoldBack = h.holdBack(others, share, now)
	h.act(ctx, r, m.Members, "more replicas share the shards")
	h.mu.Lock()
	h.joining = holding.Joining(h.id, h.count, share, len(h.tries), holders)
	h.mu.Unlock()
	h.warmLate(ctx, holders)
	h.warmJoining(ctx, holders)
}

// standAside drains every shard this replica holds and stops the engines it warms: it stands
// by, or replicas of another number of shards reconcile (why, for the log). n is the replicas
// counted, for the log too.
func (h *shardHolder) standAside(ctx context.Context, n int, why string) {
	h.mu.Lock()
	h.joining = nil
	h.mu.Unlock()
	h.act(ctx, h.round(nil, 0, time.Now()), n, why)
	h.warmLate(ctx, nil)
}

// round is what this replica knows at this round, for holding.Decide: the shards' Leases
// (holders, nil when it stands aside), its share, and the shards it leads, tries and warms.
func (h *shardHolder) round(holders map[int]holding.Lease, share int, now time.Time) holding.Round {
	r := holding.Round{Self: h.id, Count: h.count, Share: share, Leases: holders}
	for _, t := range h.current() {
		if t.isLeading() {
			r.Leading = append(r.Leading, t.Index)
		} else {
			r.Trying = append(r.Trying, t.Index)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.warm {
		r.Warm = append(r.Warm, i)
	}
	for i := range h.count {
		if holders[i].Holder == "" && h.leftToWarmer(i, now) {
			r.LeftToOthers = append(r.LeftToOthers, i)
		}
	}
	return r
}

// act carries out holding.Decide's plan for r: drops the shards another replica took, drains
// those beyond the share (why, and the replicas counted, for the log), and tries free ones.
func (h *shardHolder) act(ctx context.Context, r holding.Round, members int, why string) {
	plan := holding.Decide(r)
	tries := map[int]*shardTry{}
	for _, t := range h.current() {
		tries[t.Index] = t
	}
	for _, i := range plan.Drop {
		h.drop(tries[i])
	}
	for _, i := range plan.Drain {
		h.moves.count(tries[i].Shard, drained)
		h.log.Info("draining a shard", "why", why, "shard", tries[i].String(), "replicas", members, "fairShare", r.Share)
		h.drop(tries[i])
	}
	for _, i := range plan.Try {
		h.try(ctx, shard.Shard{Index: i, Count: h.count})
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
