package holding

// Members is what a replica knows, at a round, of the replicas that share the shards.
type Members struct {
	// Count is the number of shards. Member is whether this replica holds a member slot,
	// Standby whether it holds the standby Lease instead, and StandbyPeer the other replica that
	// holds the standby Lease ("" for none).
	Count       int
	Member      bool
	Standby     bool
	StandbyPeer string
	// Others are the other replicas' member slots, and Leases the shards' Leases, as this
	// replica judged them.
	Others []Lease
	Leases map[int]Lease
}

// Membership is how a replica counts the replicas that share the shards.
type Membership struct {
	// Members is how many replicas share the shards, this one among them unless Idle; Share is
	// the most shards one holds: the shards over the members, rounded up.
	Members, Share int
	// Peers are the other replicas counted live, the standby peer among them when it takes a
	// vacant slot's place: with this one, the replicas that warm a late holder's shards (Warmers).
	Peers []string
	// Idle is whether this replica holds and warms nothing: it stands by and no member is gone.
	Idle bool
}

// Count returns the membership of m. A replica renews its member slot in its rounds of reads
// and its shards' Leases with electors of their own, so neither alone says it is gone:
//   - late to renew its slot, a replica is gone only if it renews no shard Lease on time
//     either: one whose rounds were slow (a busy machine) still renews its shards;
//   - late to renew every shard Lease it holds, it is gone even if its slot is not late yet: a
//     replica that died or was cut off renewed its slot last in a round that may have come
//     after its shards' last renewals, and until its slot is late too it would be counted live,
//     given its own shards to warm, and keep their share from the others.
//
// A replica that stands by is counted in while a slot is vacant, as it takes the place of a
// member gone or leaving: by the others when fewer live replicas than slots hold one, by itself
// only when it saw a member gone (a slot it found free it takes instead, and slots it read as
// missing may have been taken since by replicas starting beside it). The same Members give the
// same Membership.
func Count(m Members) Membership {
	var out Membership
	live := 0
	if m.Member {
		live++
	}
	gone := 0
	for _, other := range m.Others {
		held, onTime := renewals(other.Holder, m.Leases)
		if onTime == 0 && (other.Late || held > 0) {
			gone++
			continue
		}
		out.Peers = append(out.Peers, other.Holder)
		live++
	}
	switch {
	case m.Standby && gone > 0:
		out.Members = live + 1
	case m.Standby:
		out.Members, out.Idle = max(live, 1), true
	case m.StandbyPeer != "" && live < m.Count:
		out.Members = live + 1
		out.Peers = append(out.Peers, m.StandbyPeer)
	default:
		out.Members = max(live, 1)
	}
	out.Share = (m.Count + out.Members - 1) / out.Members
	return out
}

// renewals counts the shard Leases of leases that replica holds, and those it is not late to
// renew.
func renewals(replica string, leases map[int]Lease) (held, onTime int) {
	for _, l := range leases {
		if l.Holder != replica {
			continue
		}
		held++
		if !l.Late {
			onTime++
		}
	}
	return held, onTime
}
