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
}

// Plan is what a replica does at a round, in this order.
type Plan struct {
	// Drop are the shards it tries or leads whose Lease another replica holds: that one took a
	// free shard first, or took one this replica led while it was stopped.
	Drop []int
	// Drain are the shards it leads beyond its share, least preferred first: it stops their
	// engines, then releases their Leases.
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
	slices.SortFunc(leading, byHash)
	if over := len(leading) - max(r.Share, 0); over > 0 {
		p.Drain, leading = leading[:over], leading[over:]
	}
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
