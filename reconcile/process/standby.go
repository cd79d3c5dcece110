package process

// The standby: with more replicas than shards, the first replica without a member slot holds the
// standby Lease, and while a member slot is vacant every replica counts it in, so that a gone
// member's shards move once, to it (shardHolder's doc).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/shard/holding"
)

// readStandby reads the standby Lease: nil when there is none; served is false when this
// replica may not read it (a chart before standby Leases does not name it: a standby then waits
// unseen).
func (h *shardHolder) readStandby(ctx context.Context) (l *coordinationv1.Lease, served bool, err error) {
	l, err = h.kube.CoordinationV1().Leases(h.namespace).Get(ctx, StandbyLease(h.name), metav1.GetOptions{})
	forbidden := apierrors.IsForbidden(err)
	if forbidden && !h.standbyForbidden {
		h.log.Warn("this replica may not read the standby Lease: with more replicas than shards, the one standing by is not seen, and a gone member's shards move twice, to another member, then to it (give the operator's Role get, create and update on the Lease, as the chart's does)", "lease", StandbyLease(h.name), "err", err)
	}
	h.standbyForbidden = forbidden
	switch {
	case forbidden:
		return nil, false, nil
	case apierrors.IsNotFound(err):
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading the standby Lease %s: %w", StandbyLease(h.name), err)
	}
	return l, true, nil
}

// keepStandby keeps the standby Lease l (nil: none) while this replica holds no member slot:
// it renews it, or takes it when free, and releases it once this replica holds a slot. It sets
// h.standby, whether this replica holds it, and h.standbyPeer, the other replica of this number
// of shards that holds it ("" for none).
func (h *shardHolder) keepStandby(ctx context.Context, now time.Time, l *coordinationv1.Lease, served bool) error {
	name := StandbyLease(h.name)
	h.standby, h.standbyPeer = false, ""
	if !served {
		return nil
	}
	var observed holding.Lease
	if l != nil {
		observed = h.observe(l, now)
	}
	var err error
	switch {
	case observed.Holder == h.id && h.member != "":
		// It holds a slot now: the next replica in line may stand by.
		_, err = h.release(name)
		return err
	case observed.Holder == h.id:
		h.standby, err = h.renew(ctx, l, now)
		return err
	case observed.Holder == "" && h.member == "":
		h.standby, err = h.take(ctx, name, h.timings.LeaseDuration)
		return err
	case observed.Holder != "" && l.Labels[LabelShards] == strconv.Itoa(h.count):
		// Counted until its Lease runs out, late or not: it renews it in its rounds of reads,
		// which take seconds on a busy machine, most of all while it warms a shard. Dropped
		// while late, it would leave the others to warm the shard it warms.
		h.standbyPeer = observed.Holder
	}
	return nil
}
