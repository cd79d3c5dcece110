package process

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

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

// heldChanged tells onHeld how many shards this replica leads now.
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

// observation is a Lease's version and when this replica first saw it.
type observation struct {
	resourceVersion string
	since           time.Time
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

// isLeading reports whether the try leads: its elector holds the Lease.
func (t *shardTry) isLeading() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leading
}
