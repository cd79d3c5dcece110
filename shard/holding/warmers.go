package holding

import (
	"slices"
)

// Warmers gives each shard of a late holder one warmer among candidates (the replica that asks,
// then its peers): in the order of the Leases' last renewals (then of the shards), the one that
// hashes best with the shard (Rendezvous) among those below share with the shards they hold and
// were given. Every replica computes the same from the same Leases, so one warms each shard, not
// all. A shard keeps its warmer (given, the last round's answer) while its Lease is free, and its
// warmer's load counts it; it loses the warmer once the Lease is held again. A shard whose holder's
// Lease ran out before the asking replica saw it late is given one too, as the others gave it.
// Replicas whose rounds saw a dead holder's shards go late in different steps still agree: each saw
// them go late in the order of their last renewals, the order in which they are given.
func Warmers(count, share int, leases map[int]Lease, candidates []string, given map[int]string) map[int]string {
	load := map[string]int{}
	for _, l := range leases {
		if l.Holder != "" && !l.Late {
			load[l.Holder]++
		}
	}
	order := make([]int, count)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return leases[a].Renewed.Compare(leases[b].Renewed) })
	warmers := map[int]string{}
	for _, i := range order {
		l := leases[i]
		w, kept := given[i]
		switch {
		case l.Holder == "" && kept:
			// A free shard keeps its warmer, which takes it first: counted where it was given,
			// so that the shards after it are given as by a replica that saw them all late in
			// one round.
			warmers[i] = w
			load[w]++
		case l.Late || l.Expired:
			// Its holder is late, or died before this replica saw it late (a round of its reads
			// took longer than the late window): it gets the warmer the others give it, never
			// its late holder (one still counted live renews another shard on time).
			if best := bestWarmer(candidates, load, share, i, l.Holder); best != "" {
				warmers[i] = best
				load[best]++
			}
		}
		// Else held on time, or released by its holder: no one warms it.
	}
	return warmers
}

// bestWarmer returns the candidate but holder below share (with the shards it holds and was
// given, load) that hashes best with shard i, or "" when all are at their share.
func bestWarmer(candidates []string, load map[string]int, share, i int, holder string) string {
	best, bestHash := "", uint64(0)
	for _, c := range candidates {
		if c == holder || load[c] >= share {
			continue
		}
		if hash := Rendezvous(c, i); best == "" || hash > bestHash {
			best, bestHash = c, hash
		}
	}
	return best
}

// Warming says which shards replica self warms at a round: of those it warms now (warm), it stops
// the ones whose Lease is held again on time by another replica (that one was only slow, or took
// it) or that another replica warms now (warmers, this round's Warmers), but those a holder hands
// over to it (joining); and it starts the shards of late holders given to it that it neither warms
// nor tries yet (tried). Nil leases (it stands aside) stops them all. The same arguments give the
// same answer, start in shard order.
func Warming(self string, leases map[int]Lease, warmers map[int]string, joining, warm, tried []int) (stop, start []int) {
	for _, i := range warm {
		l, ok := leases[i]
		if ok && (l.Late && warmers[i] == self || l.Holder == "" || l.Holder == self || slices.Contains(joining, i)) {
			continue
		}
		stop = append(stop, i)
	}
	for i, l := range leases {
		if l.Late && warmers[i] == self && !slices.Contains(warm, i) && !slices.Contains(tried, i) {
			start = append(start, i)
		}
	}
	slices.Sort(start)
	slices.Sort(stop)
	return stop, start
}
