package holding

import (
	"cmp"
	"slices"
)

// Round is what one replica knows at one round of holding its shards.
type Round struct {
	// Self is the replica's identity, Count the number of shards, and Share the most shards one
	// replica holds: the shards over the replicas that share them, rounded up (0: hold none).
	Self         string
	Count, Share int
	// Leases are the shards' Leases as the replica judged them (a shard with none is free).
	Leases map[int]Lease
	// Leading are the shards whose Leases the replica holds and whose engines write; Trying those
	// it has taken but does not lead yet.
	Leading, Trying []int
	// Warm are the shards whose engines the replica runs without writes (a late holder's): it
	// takes them first when they are free.
	Warm []int
	// LeftToOthers are the free shards the replica leaves to the replica that warmed them, for a
	// while after it saw them free (that one reconciles them at once).
	LeftToOthers []int
	// HoldBack are shards it leads beyond its share that it keeps for now: a replica that will
	// take them warms them and has not said it is ready (Joining).
	HoldBack []int
}

// Plan is what a replica does at a round, in this order.
type Plan struct {
	// Drop are the shards it tries or leads whose Lease another replica holds: that one took a
	// free shard first, or took one this replica led while it was stopped.
	Drop []int
	// Drain are the shards it leads beyond its share (Drains), least preferred first, but those
	// it holds back: it stops their engines, then releases their Leases.
	Drain []int
	// Try are the free shards it takes, most preferred first: those it warms, then by its
	// rendezvous hash.
	Try []int
}

// Decide returns what the replica of r does at this round. The same Round gives the same Plan.
func Decide(r Round) Plan {
	var p Plan
	takenByOthers := func(i int) bool { h := r.Leases[i].Holder; return h != "" && h != r.Self }
	var leading, trying []int
	for _, i := range r.Trying {
		if takenByOthers(i) {
			p.Drop = append(p.Drop, i)
		} else {
			trying = append(trying, i)
		}
	}
	for _, i := range r.Leading {
		if takenByOthers(i) {
			p.Drop = append(p.Drop, i)
		} else {
			leading = append(leading, i)
		}
	}
	slices.Sort(p.Drop)
	byHash := func(a, b int) int { return cmp.Compare(Rendezvous(r.Self, a), Rendezvous(r.Self, b)) }
	for _, i := range Drains(r.Self, leading, r.Share) {
		if !slices.Contains(r.HoldBack, i) {
			p.Drain = append(p.Drain, i)
		}
	}
	leading = slices.DeleteFunc(leading, func(i int) bool { return slices.Contains(p.Drain, i) })
	var free []int
	for i := range r.Count {
		if r.Leases[i].Holder == "" && !slices.Contains(r.Trying, i) && !slices.Contains(r.Leading, i) && !slices.Contains(r.LeftToOthers, i) {
			free = append(free, i)
		}
	}
	slices.SortFunc(free, func(a, b int) int {
		if wa, wb := slices.Contains(r.Warm, a), slices.Contains(r.Warm, b); wa != wb {
			if wa {
				return -1
			}
			return 1
		}
		return byHash(b, a)
	})
	want := max(r.Share-len(leading)-len(trying), 0)
	p.Try = free[:min(want, len(free))]
	return p
}

// Drains returns the shards that holder, leading held, drains at share: those beyond it that hash
// worst with its identity (Rendezvous), least preferred first. Every replica computes the same,
// so the replica that will take them can warm them first (Joining).
func Drains(holder string, held []int, share int) []int {
	byHash := slices.SortedFunc(slices.Values(held), func(a, b int) int {
		return cmp.Compare(Rendezvous(holder, a), Rendezvous(holder, b))
	})
	return byHash[:max(len(byHash)-max(share, 0), 0)]
}

// Joining returns the shards that self, holding mine of them, warms to take from the replicas
// that hold more than share and will drain them (Drains): a replica that joined takes its share
// warm instead of listing it once taken. Self says it is ready in its member slot (Lease.Warmed)
// and the holders drain then. It picks them as Decide's Try would, by its rendezvous hash, up to
// its share. A late holder's shards are the warmers' (Warmers), not in it.
func Joining(self string, count, share, mine int, leases map[int]Lease) []int {
	held := map[string][]int{}
	for i := range count {
		if l := leases[i]; l.Holder != "" && l.Holder != self && !l.Late {
			held[l.Holder] = append(held[l.Holder], i)
		}
	}
	var drained []int
	for holder, shards := range held {
		drained = append(drained, Drains(holder, shards, share)...)
	}
	slices.SortFunc(drained, func(a, b int) int { return cmp.Compare(Rendezvous(self, b), Rendezvous(self, a)) })
	return drained[:min(max(share-mine, 0), len(drained))]
}
