package holding

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestDecide is what replica a does at one round of six shards. Replica a prefers them, by its
// rendezvous hash, in the order 4, 5, 2, 3, 0, 1 (TestRendezvousOrder).
func TestDecide(t *testing.T) {
	b := Lease{Holder: "b"}
	for name, tc := range map[string]struct {
		round Round
		want  Plan
	}{
		"alone, it takes every free shard, most preferred first": {
			round: Round{Share: 6},
			want:  Plan{Try: []int{4, 5, 2, 3, 0, 1}},
		},
		"it takes no more than its share": {
			round: Round{Share: 2},
			want:  Plan{Try: []int{4, 5}},
		},
		"what it leads and tries counts in its share": {
			round: Round{Share: 3, Leading: []int{0}, Trying: []int{1}, Leases: map[int]Lease{0: {Holder: "a"}}},
			want:  Plan{Try: []int{4}},
		},
		"a shard another replica holds is not free": {
			round: Round{Share: 2, Leases: map[int]Lease{4: b, 5: b}},
			want:  Plan{Try: []int{2, 3}},
		},
		"a try another replica took first is dropped, and another tried": {
			round: Round{Share: 2, Leading: []int{0}, Trying: []int{4}, Leases: map[int]Lease{0: {Holder: "a"}, 4: b}},
			want:  Plan{Drop: []int{4}, Try: []int{5}},
		},
		"a shard it led that another replica took is dropped": {
			round: Round{Share: 1, Leading: []int{3}, Leases: map[int]Lease{3: b}},
			want:  Plan{Drop: []int{3}, Try: []int{4}},
		},
		"beyond its share it drains the least preferred first": {
			round: Round{Share: 2, Leading: []int{0, 1, 2, 4}, Leases: map[int]Lease{0: {Holder: "a"}, 1: {Holder: "a"}, 2: {Holder: "a"}, 4: {Holder: "a"}}},
			want:  Plan{Drain: []int{1, 0}},
		},
		"it keeps a shard beyond its share while the replica that takes it warms it": {
			round: Round{Share: 2, Leading: []int{0, 1, 2, 4}, HoldBack: []int{1}, Leases: map[int]Lease{0: {Holder: "a"}, 1: {Holder: "a"}, 2: {Holder: "a"}, 4: {Holder: "a"}}},
			want:  Plan{Drain: []int{0}},
		},
		"standing aside (share 0) it drains all it leads and tries nothing": {
			round: Round{Share: 0, Leading: []int{2, 5}},
			want:  Plan{Drain: []int{2, 5}},
		},
		"the shards it warms come first": {
			round: Round{Share: 2, Warm: []int{1}},
			want:  Plan{Try: []int{1, 4}},
		},
		"a free shard is left to the replica that warmed it": {
			round: Round{Share: 2, LeftToOthers: []int{4}},
			want:  Plan{Try: []int{5, 2}},
		},
		"fewer free shards than its share: it takes those there are": {
			round: Round{Share: 3, Leases: map[int]Lease{0: b, 1: b, 2: b, 3: b, 5: b}},
			want:  Plan{Try: []int{4}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tc.round.Self, tc.round.Count = "a", 6
			if diff := cmp.Diff(tc.want, Decide(tc.round), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJoining is which shards replica a warms to take from the holders over their share, of six
// shards. a prefers them in the order 4, 5, 2, 3, 0, 1; b in 1, 0, 3, 2, 5, 4 and c in 0 to 5
// (TestRendezvousOrder), and each holder drains those it prefers least.
func TestJoining(t *testing.T) {
	held := func(holder string, shards ...int) map[int]Lease {
		out := map[int]Lease{}
		for _, i := range shards {
			out[i] = Lease{Holder: holder}
		}
		return out
	}
	both := held("b", 0, 1, 2)
	for i, l := range held("c", 3, 4, 5) {
		both[i] = l
	}
	late := held("b", 0, 1, 2, 3, 4, 5)
	for i := range late {
		late[i] = Lease{Holder: "b", Late: true}
	}
	for name, tc := range map[string]struct {
		share, mine int
		leases      map[int]Lease
		want        []int
	}{
		"b holds all six, a joins: a warms the three b drains, in a's order": {3, 0, held("b", 0, 1, 2, 3, 4, 5), []int{4, 5, 2}},
		"b and c hold three each, a joins: the one each drains":              {2, 0, both, []int{5, 2}},
		"what a holds already counts in its share":                           {2, 1, both, []int{5}},
		"no holder is over the share":                                        {3, 0, both, nil},
		"a late holder's shards are the warmers', not a joiner's":            {3, 0, late, nil},
		"its own Leases are not handed to it":                                {3, 3, held("a", 0, 1, 2), nil},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Joining("a", 6, tc.share, tc.mine, tc.leases), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Joining (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRendezvousOrder holds the preference TestDecide's cases are written from, and shows that
// another replica prefers the shards in another order.
func TestRendezvousOrder(t *testing.T) {
	order := func(id string) []int { return Decide(Round{Self: id, Count: 6, Share: 6}).Try }
	if diff := cmp.Diff([]int{4, 5, 2, 3, 0, 1}, order("a")); diff != "" {
		t.Errorf("replica a's order (-want +got):\n%s", diff)
	}
	if cmp.Equal(order("a"), order("b")) {
		t.Error("replica b prefers the shards in replica a's order")
	}
}
