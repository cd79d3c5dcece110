package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"evals.si/operator/evalsi"
	"evals.si/operator/shard"
)

// The timings of every Lease: a holder renews every retryPeriod and gives up after renewDeadline
// without a renewal; another replica may take the Lease leaseDuration after its last renewal.
// The margin between the two is the time a holder that lost its Lease has to stop writing.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// LabelShards on each of the operator's Leases is the number of shards of the replica that wrote
// it: replicas with another number slice the objects otherwise, and must not run beside it.
const LabelShards = evalsi.Group + "/shards"

// ShardLease is the name of the Lease of shard s of the operator whose leader election name is
// name: name itself when the operator does not shard (as a single leader's Lease always was).
func ShardLease(name string, s shard.Shard) string {
	if s.IsWhole() {
		return name
	}
	return name + "-shard-" + strconv.Itoa(s.Index)
}

// LeaseHolder returns who holds l at now, or "" when no one does: no holder, or not renewed
// within its duration.
func LeaseHolder(l *coordinationv1.Lease, now time.Time) string {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return ""
	}
	if now.After(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)) {
		return ""
	}
	return *s.HolderIdentity
}

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

// observation is a Lease's version and when this replica first saw it.
type observation struct {
	resourceVersion string
	since           time.Time
}

// observedHolder returns who holds l as this replica judges it at now: no one when l names no
// holder, or when l has not changed (renewed) for its duration since this replica first saw that
// version. Unlike the Lease's renewTime, this does not trust another machine's clock, as client-go's
// elector does not; this replica reads the Leases every retryPeriod, so that a killed holder's
// shard is taken about a Lease duration after its last renewal.
func (h *shardHolder) observedHolder(l *coordinationv1.Lease, now time.Time) string {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.LeaseDurationSeconds == nil {
		return ""
	}
	o, ok := h.seen[l.Name]
	if !ok || o.resourceVersion != l.ResourceVersion {
		o = observation{resourceVersion: l.ResourceVersion, since: now}
		h.seen[l.Name] = o
	}
	if *s.HolderIdentity != h.id && now.Sub(o.since) > time.Duration(*s.LeaseDurationSeconds)*time.Second {
		return ""
	}
	return *s.HolderIdentity
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

// take makes this replica the holder of the Lease name, which it judged free, unless another
// replica changed it since (a conflict: it reports false).
func (h *shardHolder) take(ctx context.Context, name string) (bool, error) {
	leases := h.kube.CoordinationV1().Leases(h.namespace)
	now := metav1.NewMicroTime(time.Now())
	seconds := int32(leaseDuration / time.Second)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: h.labels()},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &h.id, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{FieldManager: evalsi.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	if holder := h.observedHolder(l, now.Time); holder != "" && holder != h.id {
		return false, nil
	}
	transitions := int32(0)
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions + 1
	}
	l.Labels = h.labels()
	l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &h.id, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now, LeaseTransitions: &transitions}
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: evalsi.FieldManager})
	if apierrors.IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}

// release gives up the Lease name if this replica still holds it: no holder, and a duration of
// one second, as client-go's elector releases one.
func (h *shardHolder) release(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), renewDeadline)
	defer cancel()
	leases := h.kube.CoordinationV1().Leases(h.namespace)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != h.id {
		return nil
	}
	now, second, nobody := metav1.NewMicroTime(time.Now()), int32(1), ""
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &nobody, &second, &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return nil // changed since it was read: another replica took it
	}
	return err
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

// holders returns who holds each shard's Lease now ("" for none), and, when replicas with another
// number of shards hold a Lease, which: the Leases of this count carry it (LabelShards), and the
// first Lease of the other family (the single Lease when this replica shards, the first shard's
// when it does not) is read too. A rolling change of --shards is safe: the new replicas take
// nothing until the old ones have stopped.
func (h *shardHolder) holders(ctx context.Context, now time.Time) (map[int]string, string, error) {
	out, conflict := map[int]string{}, ""
	names := make([]string, 0, h.count+1)
	for i := range h.count {
		names = append(names, ShardLease(h.name, shard.Shard{Index: i, Count: h.count}))
	}
	if h.count > 1 {
		names = append(names, h.name)
	} else {
		names = append(names, ShardLease(h.name, shard.Shard{Index: 0, Count: 2}))
	}
	for i, name := range names {
		l, err := h.kube.CoordinationV1().Leases(h.namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || i == h.count && apierrors.IsForbidden(err) {
			// The other family's Lease may be beyond this replica's RBAC (a chart before shards
			// named it): the check is then not made.
			continue
		}
		if err != nil {
			return nil, "", err
		}
		holder := h.observedHolder(l, now)
		if count := cmp.Or(l.Labels[LabelShards], "1"); holder != "" && (i == h.count || count != strconv.Itoa(h.count)) {
			conflict = fmt.Sprintf("%s holds Lease %s with --shards=%s", holder, name, count)
		}
		if i < h.count {
			out[i] = holder
		}
	}
	return out, conflict, nil
}

// labels are those of every Lease this replica writes.
func (h *shardHolder) labels() map[string]string {
	return map[string]string{LabelShards: strconv.Itoa(h.count)}
}

// MemberLease is the name of member slot j of the operator whose leader election name is name.
// A replica is counted while it holds a slot; there are as many slots as shards, since a
// replica beyond them would hold no shard (it waits for a slot, as a standby).
func MemberLease(name string, j int) string { return name + "-member-" + strconv.Itoa(j) }

// renewMember renews this replica's member slot, or takes a free one, and returns how many slots
// are held (this replica's included).
func (h *shardHolder) renewMember(ctx context.Context, now time.Time) (int, error) {
	leases := h.kube.CoordinationV1().Leases(h.namespace)
	renew, seconds := metav1.NewMicroTime(now), int32(leaseDuration/time.Second)
	live, mine := 0, false
	for j := range h.count {
		name := MemberLease(h.name, j)
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if mine {
				continue
			}
			_, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: h.labels()},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &h.id, LeaseDurationSeconds: &seconds, RenewTime: &renew, AcquireTime: &renew},
			}, metav1.CreateOptions{FieldManager: evalsi.FieldManager})
			if err == nil {
				live, mine, h.member = live+1, true, name
			} else if !apierrors.IsAlreadyExists(err) {
				return 0, err
			}
			continue
		case err != nil:
			return 0, err
		}
		holder := h.observedHolder(l, now)
		switch {
		case holder == h.id && !mine, holder == "" && !mine && h.member == "":
			// Ours (renewed), or free and this replica has none (taken; a conflict means another
			// replica took it first).
			if holder == "" {
				l.Spec.HolderIdentity, l.Spec.AcquireTime = &h.id, &renew
			}
			l.Labels = h.labels()
			l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &renew, &seconds
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: evalsi.FieldManager}); err == nil {
				live, mine, h.member = live+1, true, name
			} else if !apierrors.IsConflict(err) {
				return 0, err
			}
		case holder != "" && l.Labels[LabelShards] == strconv.Itoa(h.count):
			// A replica with another number of shards reconciles nothing beside this one
			// (holders): it is not counted.
			live++
		}
	}
	if !mine {
		h.member = ""
	}
	return live, nil
}

// leave releases this replica's member slot, so that the others count it out at once.
func (h *shardHolder) leave() {
	if h.member == "" {
		return
	}
	if err := h.release(h.member); err != nil {
		h.log.Warn("releasing the member Lease", "lease", h.member, "err", err)
	}
}

// errNoElection is why an operator that shards must elect.
var errNoElection = errors.New("sharding needs leader election: --shards above 1 with --leader-elect=false")
