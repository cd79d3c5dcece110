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
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"evals.si/operator/evalsi"
	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
)

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
