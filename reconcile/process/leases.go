package process

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"evals.si/operator/evalsi"
	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
)

// LeaseTimings are the timings of every Lease a replica holds: it renews each every RetryPeriod
// and gives up after RenewDeadline without a renewal; another replica may take the Lease
// LeaseDuration after its last renewal (ShardLeaseDuration for a shard's Lease). The margin
// between the last two is the time a holder that lost its Lease has to stop writing; the shard
// Lease's duration bounds how long a killed replica's shards wait for another.
type LeaseTimings struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ShardLeaseDuration is the duration of the shards' Leases (LeaseDuration when zero): the
	// member slots and the standby Lease count replicas, and keep LeaseDuration. Shorter, a
	// killed replica's shards are taken sooner; but a holder must renew within RenewDeadline,
	// which must be shorter still, so that an API server slow for that long makes it give up its
	// shards, and another take them with their engines started anew.
	ShardLeaseDuration time.Duration
}

// shardLease is the duration of the shards' Leases.
func (t LeaseTimings) shardLease() time.Duration {
	return cmp.Or(t.ShardLeaseDuration, t.LeaseDuration)
}

// DefaultLeaseTimings are those of Kubernetes' own controllers.
var DefaultLeaseTimings = LeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// Validate says what is wrong with t, naming the flag.
func (t LeaseTimings) Validate() error {
	switch {
	case t.RetryPeriod <= 0:
		return fmt.Errorf("--leader-elect-retry-period must be positive, not %s", t.RetryPeriod)
	case float64(t.RenewDeadline) <= leaderelection.JitterFactor*float64(t.RetryPeriod):
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be longer than %v times --leader-elect-retry-period (%s)", t.RenewDeadline, leaderelection.JitterFactor, t.RetryPeriod)
	case t.LeaseDuration <= t.RenewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s)", t.LeaseDuration, t.RenewDeadline)
	case t.LeaseDuration%time.Second != 0:
		return fmt.Errorf("--leader-elect-lease-duration must be whole seconds (a Lease counts in seconds), not %s", t.LeaseDuration)
	case t.shardLease() <= t.RenewDeadline:
		return fmt.Errorf("--shard-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s)", t.shardLease(), t.RenewDeadline)
	case t.shardLease()%time.Second != 0:
		return fmt.Errorf("--shard-lease-duration must be whole seconds (a Lease counts in seconds), not %s", t.shardLease())
	}
	return nil
}

// late is how long a Lease another replica holds may go without a renewal before this replica
// judges its holder late: three renewals missed, where one may be missed to the two replicas'
// reading and renewing out of step. A late holder's shards are warmed (shardHolder.warmLate).
func (t LeaseTimings) late() time.Duration { return 3 * t.RetryPeriod }

// warmerGrace is how long a replica whose rounds take up to round leaves a free shard to the
// replica that warmed it (leftToWarmer): two round periods, a period being a RetryPeriod and a
// round. Each replica judges a Lease run out a duration after its own first sight of the last
// renewal, so the warmer may see the Lease free up to a period after another replica, and takes
// it in its next round, up to a period later. With one RetryPeriod the two raced for it; on a
// busy machine a round of reads takes seconds (the rounds of other replicas are judged by this
// one's, against the same API server).
func (t LeaseTimings) warmerGrace(round time.Duration) time.Duration {
	return 2 * (t.RetryPeriod + round)
}

// LabelShards on each of the operator's Leases is the number of shards of the replica that wrote
// it: replicas with another number slice the objects otherwise, and must not run beside it.
const LabelShards = evalsi.Group + "/shards"

// observation is a Lease's version and when this replica first saw it.
type observation struct {
	resourceVersion string
	since           time.Time
}

// observe returns l as this replica judges it at now (holding.Observe), remembering when it
// first saw each version of each Lease, and notes when the first Lease of a late holder runs out
// (shardHolder.expires).
func (h *shardHolder) observe(l *coordinationv1.Lease, now time.Time) holding.Lease {
	o, ok := h.seen[l.Name]
	if !ok || o.resourceVersion != l.ResourceVersion {
		o = observation{resourceVersion: l.ResourceVersion, since: now}
		h.seen[l.Name] = o
	}
	judged, expires := holding.Observe(l, h.id, o.since, now, h.timings.late())
	if !expires.IsZero() && (h.expires.IsZero() || expires.Before(h.expires)) {
		h.expires = expires
	}
	return judged
}

// take makes this replica the holder of the Lease name, which it judged free, unless another
// replica changed it since (a conflict: it reports false).
func (h *shardHolder) take(ctx context.Context, name string, duration time.Duration) (bool, error) {
	leases := h.kube.CoordinationV1().Leases(h.namespace)
	now := metav1.NewMicroTime(time.Now())
	seconds := int32(duration / time.Second)
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
	if holder := h.observe(l, now.Time).Holder; holder != "" && holder != h.id {
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
// one second, as client-go's elector releases one. It reports whether it did.
func (h *shardHolder) release(name string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), h.timings.RenewDeadline)
	defer cancel()
	leases := h.kube.CoordinationV1().Leases(h.namespace)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != h.id {
		return false, nil
	}
	now, second, nobody := metav1.NewMicroTime(time.Now()), int32(1), ""
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &nobody, &second, &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: evalsi.FieldManager})
	if apierrors.IsConflict(err) {
		return false, nil // changed since it was read: another replica took it
	}
	return err == nil, err
}

// holders returns each shard's Lease now, and, when replicas with another number of shards hold
// a Lease, which: the Leases of this count carry it (LabelShards), the first Lease of the other
// family (the single Lease when this replica shards, the first shard's when it does not) is read
// too, and so is every shard Lease labelled with another number (otherCountShard). A rolling
// change of --shards is safe: the new replicas take nothing until the old ones have stopped.
func (h *shardHolder) holders(ctx context.Context, now time.Time) (map[int]holding.Lease, string, error) {
	out, conflict := map[int]holding.Lease{}, ""
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
		observed := h.observe(l, now)
		if count := cmp.Or(l.Labels[LabelShards], "1"); observed.Holder != "" && (i == h.count || count != strconv.Itoa(h.count)) {
			conflict = fmt.Sprintf("%s holds Lease %s with --shards=%s", observed.Holder, name, count)
		}
		if i < h.count {
			out[i] = observed
		}
	}
	if conflict != "" {
		return out, conflict, nil
	}
	conflict, err := h.otherCountShard(ctx, now, names)
	return out, conflict, err
}

// otherCountShard returns which replica with another number of shards holds one of this
// operator's shard Leases ("" for none), reading every one of them: with fewer shards than before
// (a rolling change from three to two), an old replica's last shards have Leases that this number
// has not, and their objects are within this number's shards. One List, of the Leases labelled
// with another number. A replica whose RBAC refuses it the List (a Role of the user's own, or a
// chart before it granted it) says so once, and sees only the Leases holders reads. The Leases
// holders has just read (read) are skipped: the List's copy may be older, and observing it would
// make the Lease look renewed (observe notes each version it sees).
func (h *shardHolder) otherCountShard(ctx context.Context, now time.Time, read []string) (string, error) {
	// From the API server's cache as it is (resourceVersion 0): a consistent List waits until
	// the cache has caught up with etcd, which under a burst of writes (a killed replica's shards
	// repaired) can take seconds, and a slower round warms a gone holder's shards later. A
	// Lease taken just now is seen the next round; the ones this guards against are held for
	// as long as their replicas run.
	list, err := h.kube.CoordinationV1().Leases(h.namespace).List(ctx, metav1.ListOptions{
		LabelSelector:   LabelShards + "," + LabelShards + "!=" + strconv.Itoa(h.count),
		ResourceVersion: "0",
	})
	forbidden := apierrors.IsForbidden(err)
	if forbidden && !h.listForbidden {
		h.log.Warn("this replica may not list its namespace's Leases: when the number of shards is lowered, it may take shards while an old replica still holds one of its last shards, whose Lease it does not read, and both write those objects until the old replica's next round (give the operator's Role list on leases, as the chart's does)", "err", err)
	}
	h.listForbidden = forbidden
	if forbidden {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("listing the Leases of other numbers of shards: %w", err)
	}
	for i := range list.Items {
		l := &list.Items[i]
		if l.Name != h.name && !strings.HasPrefix(l.Name, h.name+"-shard-") || slices.Contains(read, l.Name) {
			continue // a member slot or the standby (its holder holds no shard by it), or read already
		}
		if observed := h.observe(l, now); observed.Holder != "" {
			return fmt.Sprintf("%s holds Lease %s with --shards=%s", observed.Holder, l.Name, l.Labels[LabelShards]), nil
		}
	}
	return "", nil
}

// labels are those of every Lease this replica writes.
func (h *shardHolder) labels() map[string]string {
	return map[string]string{LabelShards: strconv.Itoa(h.count)}
}

// renewMember renews this replica's member slot, or takes a free one, and returns the slots of
// the other replicas of this number of shards as this replica judges them (observe), and whether
// this replica took its slot just now (joined). h.member is its own slot ("" when every slot is
// held by others); it keeps the standby Lease too (keepStandby).
func (h *shardHolder) renewMember(ctx context.Context, now time.Time) (others []holding.Lease, joined bool, err error) {
	leases := h.kube.CoordinationV1().Leases(h.namespace)
	// The standby Lease first: a standby takes a slot, then releases it, so that this replica
	// finds it either standing by or holding the slot, never neither (then it would count itself
	// alone and take the shards the standby takes).
	standby, served, err := h.readStandby(ctx)
	if err != nil {
		return nil, false, err
	}
	mine := ""
	var free []string
	for j := range h.count {
		name := MemberLease(h.name, j)
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			free = append(free, name)
			continue
		}
		if err != nil {
			return nil, false, err
		}
		switch observed := h.observe(l, now); {
		case observed.Holder == h.id && mine == "":
			h.announceWarmed(l)
			renewed, err := h.renew(ctx, l, now)
			if err != nil {
				return nil, false, err
			}
			if renewed {
				mine = name
			}
		case observed.Holder == "":
			free = append(free, name)
		case l.Labels[LabelShards] == strconv.Itoa(h.count):
			// A replica with another number of shards reconciles nothing beside this one
			// (holders): it is not counted.
			others = append(others, observed)
		}
	}
	for _, name := range free {
		if mine != "" {
			break
		}
		taken, err := h.take(ctx, name, h.timings.LeaseDuration)
		if err != nil {
			return nil, false, err
		}
		if taken {
			mine, joined = name, true
		}
	}
	h.member = mine
	if err := h.keepStandby(ctx, now, standby, served); err != nil {
		return nil, false, fmt.Errorf("keeping the standby Lease %s: %w", StandbyLease(h.name), err)
	}
	return others, joined, nil
}

// renew writes a new renewTime on l, a Lease this replica holds; it reports false when another
// replica changed it since it was read.
func (h *shardHolder) renew(ctx context.Context, l *coordinationv1.Lease, now time.Time) (bool, error) {
	renewed := metav1.NewMicroTime(now)
	l.Spec.RenewTime = &renewed
	_, err := h.kube.CoordinationV1().Leases(h.namespace).Update(ctx, l, metav1.UpdateOptions{FieldManager: evalsi.FieldManager})
	if apierrors.IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}

// leave releases this replica's member slot, so that the others count it out at once, or the
// standby Lease (it holds one or the other: keepStandby lets go of the standby Lease in the round
// it takes a slot), so that the next replica in line stands by.
func (h *shardHolder) leave() {
	name := h.member
	if h.standby {
		name = StandbyLease(h.name)
	}
	if name == "" {
		return
	}
	if _, err := h.release(name); err != nil {
		h.log.Warn("releasing this replica's Lease; it expires instead", "lease", name, "err", err)
	}
}

// tenureLock is a shard Lease's lock that extends the shard's tenure by the renew deadline from
// when it sent each write of the Lease that named this replica and was accepted: the elector's
// acquisition and its renewals.
type tenureLock struct {
	resourcelock.Interface
	tenure   *shard.Tenure
	deadline time.Duration
}

func (l *tenureLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Create(ctx, r)
	l.extend(sent, r, err)
	return err
}

func (l *tenureLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Update(ctx, r)
	l.extend(sent, r, err)
	return err
}

func (l *tenureLock) extend(sent time.Time, r resourcelock.LeaderElectionRecord, err error) {
	if err == nil && r.HolderIdentity == l.Identity() {
		l.tenure.Extend(sent, l.deadline)
	}
}
