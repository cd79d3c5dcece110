package holding

import (
	"slices"
	"time"
)

// Handover is what a replica over its share does at a round with the shards it would drain
// (Drains) for a replica that joined.
type Handover struct {
	// Keep are the shards it keeps this round: no other replica's member slot says it warmed
	// them, and less than the wait has passed since it first would have drained them.
	Keep []int
	// Release are the shards it lets go, in the order it would drain them.
	Release []Release
	// Since is when it first would have drained each shard it still would.
	Since map[int]time.Time
}

// Release is a shard a replica lets go to a joiner, and whether the joiner said it had warmed it.
type Release struct {
	Shard  int
	Warmed bool
}

// HandOver decides the handover of would, the shards a replica would drain, at now: others are
// the other replicas' member slots, since when it first would have drained each shard (the
// previous round's Since), and wait how long it waits for a taker to warm one (a Lease
// duration). The same arguments give the same Handover; since is not changed.
func HandOver(would []int, others []Lease, since map[int]time.Time, now time.Time, wait time.Duration) Handover {
	out := Handover{Since: map[int]time.Time{}}
	for _, i := range would {
		first, ok := since[i]
		if !ok {
			first = now
		}
		out.Since[i] = first
		warmed := slices.ContainsFunc(others, func(m Lease) bool { return slices.Contains(m.Warmed, i) })
		if !warmed && now.Sub(first) < wait {
			out.Keep = append(out.Keep, i)
			continue
		}
		out.Release = append(out.Release, Release{Shard: i, Warmed: warmed})
	}
	return out
}
