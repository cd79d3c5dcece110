package process

// The warming of a late holder's shards: while its Leases run out, the replicas that will take
// them start their engines without writes (shardHolder's doc), one replica each.

import (
	"context"
	"slices"
	"time"

	"evals.si/operator/shard"
)

// assignLate gives each shard of a late holder one warmer among this replica and its peers: in
// the order of the Leases' last renewals (then of the shards), the one that hashes best with the
// shard (rendezvous hashing) among those below share with the shards they hold and were given.
// Every replica computes the same from the same Leases, so one warms each shard, not all. A shard
// keeps its warmer while its Lease is free, and its warmer's load counts it; it loses the warmer
// once the Lease is held again. A shard whose holder's Lease ran out before this replica saw it
// late is given one too, as the others gave it. Replicas whose rounds saw a dead holder's shards
// go late in different steps still agree: each saw them go late in the order of their last
// renewals, the order in which they are given.
func (h *shardHolder) assignLate(holders map[int]shardLease, share int, now time.Time) {
	load := map[string]int{}
	for _, l := range holders {
		if l.holder != "" && !l.late {
			load[l.holder]++
		}
	}
	candidates := append([]string{h.id}, h.peers...)
	order := make([]int, h.count)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return holders[a].renewed.Compare(holders[b].renewed) })
	for _, i := range order {
		l := holders[i]
		if l.holder != "" {
			delete(h.freeSince, i)
		} else if _, seen := h.freeSince[i]; !seen {
			h.freeSince[i] = now
		}
		w, given := h.warmer[i]
		switch {
		case l.holder == "" && given:
			// A free shard keeps its warmer, which takes it first: counted where it was given,
			// so that the shards after it are given as by a replica that saw them all late in
			// one round.
			load[w]++
		case l.late || l.expired:
			// Its holder is late, or died before this replica saw it late (a round of its reads
			// took longer than the late window): it gets the warmer the others give it, never
			// its late holder (one still counted live renews another shard on time).
			if best := bestWarmer(candidates, load, share, i, l.holder); best != "" {
				h.warmer[i] = best
				load[best]++
			} else {
				delete(h.warmer, i)
			}
		default:
			// Held on time, or released by its holder: no one warms it.
			delete(h.warmer, i)
		}
	}
}

// bestWarmer returns the candidate but holder below share (with the shards it holds and was
// given, load) that hashes best with shard i, or "" when all are at their share.
func bestWarmer(candidates []string, load map[string]int, share, i int, holder string) string {
	best, bestHash := "", uint64(0)
	for _, c := range candidates {
		if c == holder || load[c] >= share {
			continue
		}
		if hash := rendezvous(c, i); best == "" || hash > bestHash {
			best, bestHash = c, hash
		}
	}
	return best
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
// was only slow, or another took it) or that another replica now warms, then warms the shards of
// late holders that assignLate gave this replica. nil holders stops them all.
func (h *shardHolder) warmLate(ctx context.Context, holders map[int]shardLease) {
	var stopped []*shardEngine
	var late []int
	h.mu.Lock()
	for i, e := range h.warm {
		l, ok := holders[i]
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
		if ok && (l.late && h.warmer[i] == h.id || l.holder == "" || l.holder == h.id) {
			continue
		}
		delete(h.warm, i)
		stopped = append(stopped, e)
	}
	for i, l := range holders {
		_, warm := h.warm[i]
		_, tried := h.tries[i]
		if l.late && h.warmer[i] == h.id && !warm && !tried {
			late = append(late, i)
		}
	}
	h.mu.Unlock()
	for _, e := range stopped {
		e.halt()
	}
	slices.Sort(late)
	for _, i := range late {
		s := shard.Shard{Index: i, Count: h.count}
		h.log.Info("warming a shard: its holder is late to renew its Lease", "shard", s.String(), "holder", holders[i].holder)
		e := h.startEngine(ctx, s, make(chan struct{}))
		h.mu.Lock()
		h.warm[i] = e
		h.mu.Unlock()
	}
}
