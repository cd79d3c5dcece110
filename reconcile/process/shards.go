package process

import (
	"context"
	"errors"
	"sync"
	"time"

	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
)

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

// errNoElection is why an operator that shards must elect.
var errNoElection = errors.New("sharding needs leader election: --shards above 1 with --leader-elect=false")
