package process

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/shard/holding"
)

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
