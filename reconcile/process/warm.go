package process

// The warming of a late holder's shards: while its Leases run out, the replicas that will take
// them start their engines without writes (shardHolder's doc), one replica each.

import (
	"context"
	"slices"
	"time"

	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
)

// assignLate gives each shard of a late holder one warmer among this replica and its peers
// (holding.Warmers: every replica computes the same from the same Leases, so one warms each
// shard), and notes when this replica first saw each free shard free (leftToWarmer).
func (h *shardHolder) assignLate(holders map[int]holding.Lease, share int, now time.Time) {
	for i := range h.count {
		if holders[i].Holder != "" {
			delete(h.freeSince, i)
		} else if _, seen := h.freeSince[i]; !seen {
			h.freeSince[i] = now
		}
	}
	h.warmer = holding.Warmers(h.count, share, holders, append([]string{h.id}, h.peers...), h.warmer)
}

// leftToWarmer reports whether this replica leaves free shard i to another replica that warmed
// it, for LeaseTimings.warmerGrace of its slowest recent round after it saw it free: that
// replica's warm engine reconciles at once. After that, any replica takes it (the warmer failed
// or died).
func (h *shardHolder) leftToWarmer(i int, now time.Time) bool {
	w, ok := h.warmer[i]
	if !ok || w == h.id || !slices.Contains(h.peers, w) {
		return false
	}
	return now.Sub(h.freeSince[i]) < h.timings.warmerGrace(slices.Max(h.rounds[:]))
}

// warmLate stops the warm engines of shards whose Lease is held again by a replica on time (it
// was only slow, or another took it) or that another replica now warms, but those a holder hands
// over to this replica (h.joining), then warms the shards of late holders that assignLate gave
// this replica. nil holders stops them all.
func (h *shardHolder) warmLate(ctx context.Context, holders map[int]holding.Lease) {
	var warm, tried []int
	h.mu.Lock()
	for i, e := range h.warm {
		select {
		case <-e.done:
			// Ended on its own (an error a leading engine would meet too): warmed again if
			// still given.
			if e.err != nil {
				h.log.Warn("a warm shard's engine failed", "shard", shard.Shard{Index: i, Count: h.count}.String(), "err", e.err)
			}
			delete(h.warm, i)
			continue
		default:
		}
		warm = append(warm, i)
	}
	for i := range h.tries {
		tried = append(tried, i)
	}
	stop, start := holding.Warming(h.id, holders, h.warmer, h.joining, warm, tried)
	var stopped []*shardEngine
	for _, i := range stop {
		stopped = append(stopped, h.warm[i])
		delete(h.warm, i)
	}
	h.mu.Unlock()
	for _, e := range stopped {
		e.halt()
	}
	for _, i := range start {
		h.startWarm(ctx, i, warmedLate, "warming a shard: its holder is late to renew its Lease", holders[i].Holder)
	}
}

// startWarm starts the engine of shard i without writes, counts the move mv and logs why (the
// shard's holder too).
func (h *shardHolder) startWarm(ctx context.Context, i int, mv move, why, holder string) {
	s := shard.Shard{Index: i, Count: h.count}
	h.moves.count(s, mv)
	h.log.Info(why, "shard", s.String(), "holder", holder)
	e := h.startEngine(ctx, s, make(chan struct{}))
	h.mu.Lock()
	h.warm[i] = e
	h.mu.Unlock()
}
