package process

import (
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestObserve judges one version of a Lease at times after this replica first saw it: held, late,
// and, once it ran out, expired only while it still names another replica (a released Lease names
// no one; this replica's own is its own). Another replica's Lease carries its last renewal.
func TestObserve(t *testing.T) {
	timings := LeaseTimings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	first := time.Unix(1000, 0)
	renewed := time.Unix(990, 0) // by the holder's clock, which observe does not trust
	for name, tc := range map[string]struct {
		holder string
		after  time.Duration
		want   shardLease
	}{
		"renewed":                         {holder: "b", after: time.Second, want: shardLease{holder: "b", renewed: renewed}},
		"late: three retry periods quiet": {holder: "b", after: 2 * time.Second, want: shardLease{holder: "b", late: true, renewed: renewed}},
		"ran out naming its holder":       {holder: "b", after: 5 * time.Second, want: shardLease{expired: true, renewed: renewed}},
		"released":                        {holder: "", after: 5 * time.Second, want: shardLease{}},
		"this replica's own":              {holder: "a", after: 5 * time.Second, want: shardLease{holder: "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			h := &shardHolder{id: "a", timings: timings, seen: map[string]observation{}}
			seconds := int32(timings.LeaseDuration / time.Second)
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "shard-0-of-2", ResourceVersion: "7"},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &tc.holder, LeaseDurationSeconds: &seconds, RenewTime: &metav1.MicroTime{Time: renewed}},
			}
			h.observe(l, first)
			if got := h.observe(l, first.Add(tc.after)); got != tc.want {
				t.Errorf("observe after %s = %+v, want %+v", tc.after, got, tc.want)
			}
		})
	}
}

// TestLeftToWarmer gives the times at which a replica that did not warm a free shard looks at
// it: it leaves the shard to its on-time warmer until that one has surely seen it free too.
func TestLeftToWarmer(t *testing.T) {
	timings := LeaseTimings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	seen := time.Unix(1000, 0)
	for name, tc := range map[string]struct {
		warmer string
		peers  []string
		rounds [4]time.Duration // how long this replica's last rounds took
		after  time.Duration
		want   bool
	}{
		"this replica warms it":         {warmer: "a", peers: []string{"c"}, after: 0, want: false},
		"no warmer":                     {warmer: "", peers: []string{"c"}, after: 0, want: false},
		"the warmer is late too":        {warmer: "c", peers: nil, after: 0, want: false},
		"just seen free":                {warmer: "c", peers: []string{"c"}, after: 0, want: true},
		"the warmer read a round later": {warmer: "c", peers: []string{"c"}, after: timings.RetryPeriod + 200*time.Millisecond, want: true},
		"two rounds: the warmer failed": {warmer: "c", peers: []string{"c"}, after: 2 * timings.RetryPeriod, want: false},
		// A busy machine: a round of reads took a second and a half, three rounds ago.
		"slow rounds: two periods later": {warmer: "c", peers: []string{"c"}, rounds: [4]time.Duration{200 * time.Millisecond, 0, 0, 1500 * time.Millisecond}, after: 2*timings.RetryPeriod + 2*time.Second, want: true},
		"slow rounds: the warmer failed": {warmer: "c", peers: []string{"c"}, rounds: [4]time.Duration{200 * time.Millisecond, 0, 0, 1500 * time.Millisecond}, after: 2*timings.RetryPeriod + 3*time.Second, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			h := &shardHolder{id: "a", timings: timings, peers: tc.peers, rounds: tc.rounds, warmer: map[int]string{}, freeSince: map[int]time.Time{0: seen}}
			if tc.warmer != "" {
				h.warmer[0] = tc.warmer
			}
			if got := h.leftToWarmer(0, seen.Add(tc.after)); got != tc.want {
				t.Errorf("leftToWarmer after %s = %v, want %v", tc.after, got, tc.want)
			}
		})
	}
}

// TestAssignLateAgrees gives two surviving replicas the Leases of a late holder's shards, c's
// read too slowly to see them late (already run out): each computes the same warmer for every
// shard, and no replica is given more than its share.
func TestAssignLateAgrees(t *testing.T) {
	for count := 2; count <= 6; count++ {
		t.Run(fmt.Sprintf("%d shards", count), func(t *testing.T) {
			holders := map[int]shardLease{}
			for i := range count {
				// b is late with every third shard; a and c hold the rest in turn.
				holders[i] = shardLease{holder: []string{"b", "a", "c"}[i%3], late: i%3 == 0}
			}
			share := (count + 1) / 2
			assigned := map[string]map[int]string{}
			for _, id := range []string{"a", "c"} {
				h := survivor(id, count)
				view := holders
				if id == "c" {
					view = map[int]shardLease{}
					for i, l := range holders {
						if l.late {
							l = shardLease{expired: true}
						}
						view[i] = l
					}
				}
				h.assignLate(view, share, time.Unix(1000, 0))
				assigned[id] = h.warmer
			}
			load := map[string]int{}
			for i, l := range holders {
				if !l.late {
					load[l.holder]++
					continue
				}
				wa, wc := assigned["a"][i], assigned["c"][i]
				if wa != wc {
					t.Errorf("shard %d: a gives it to %q, c to %q", i, wa, wc)
				}
				if wa == "b" || wa == "" {
					t.Errorf("shard %d: warmer %q, want a or c", i, wa)
				}
				load[wa]++
			}
			for id, n := range load {
				if n > share {
					t.Errorf("%s holds and warms %d shards, over its share %d", id, n, share)
				}
			}
		})
	}
}

// TestAssignLateNeverGivesTheLateHolder gives a shard whose holder b is late, but renews another
// shard on time (so it is still a peer), to a replica other than b: b holding it is why it needs
// a warmer.
func TestAssignLateNeverGivesTheLateHolder(t *testing.T) {
	for count := 4; count <= 12; count++ {
		t.Run(fmt.Sprintf("%d shards", count), func(t *testing.T) {
			holders := map[int]shardLease{}
			for i := range count {
				holders[i] = shardLease{holder: []string{"b", "a", "c"}[i%3]}
			}
			holders[0] = shardLease{holder: "b", late: true}
			h := survivor("a", count)
			h.peers = append(h.peers, "b")
			h.assignLate(holders, (count+2)/3, time.Unix(1000, 0))
			// With a multiple of three shards, a and c hold their share already: no one warms it
			// until b is counted out.
			if w := h.warmer[0]; w == "b" || w == "" && count%3 != 0 {
				t.Errorf("shard 0, late with b: warmer %q, want a or c", w)
			}
		})
	}
}

// TestAssignLateAgreesOverRounds gives the late holder b's shards to the survivors a and c over
// two rounds of reads: b renewed its shards' Leases last in some order; a saw all of them late in
// the first round, c only the first k to have been renewed (it first saw the others' last
// versions a round later, so they were still on time for it); in the second round all of them
// have run out. c gives each shard the warmer a gave it, so that neither leaves a shard to the
// other.
func TestAssignLateAgreesOverRounds(t *testing.T) {
	for count := 4; count <= 9; count++ {
		var late []int
		for i := 0; i < count; i += 3 {
			late = append(late, i)
		}
		for _, renewals := range permutations(late) {
			for k := range len(late) + 1 {
				t.Run(fmt.Sprintf("%d shards, renewed last %v, c saw the first %d late first", count, renewals, k), func(t *testing.T) {
					agreeOverRounds(t, count, renewals, k)
				})
			}
		}
	}
}

// agreeOverRounds is one case of TestAssignLateAgreesOverRounds: count shards, b's renewed last
// in the order renewals, c seeing the first k of them late a round before the rest.
func agreeOverRounds(t *testing.T, count int, renewals []int, k int) {
	// round is every shard's Lease as one replica judges it in one round: b holds every third
	// shard, a and c the rest in turn; judge says how this replica sees b's.
	round := func(judge func(i int, l shardLease) shardLease) map[int]shardLease {
		holders := map[int]shardLease{}
		for i := range count {
			l := shardLease{holder: []string{"b", "a", "c"}[i%3]}
			if n := slices.Index(renewals, i); n >= 0 {
				l = judge(n, shardLease{holder: "b", renewed: time.Unix(990, 0).Add(time.Duration(n) * 100 * time.Millisecond)})
			}
			holders[i] = l
		}
		return holders
	}
	share := (count + 1) / 2
	a, c := survivor("a", count), survivor("c", count)
	a.assignLate(round(func(n int, l shardLease) shardLease { l.late = true; return l }), share, time.Unix(1000, 0))
	c.assignLate(round(func(n int, l shardLease) shardLease { l.late = n < k; return l }), share, time.Unix(1000, 0))
	ranOut := round(func(n int, l shardLease) shardLease { return shardLease{expired: true, renewed: l.renewed} })
	a.assignLate(ranOut, share, time.Unix(1001, 0))
	c.assignLate(ranOut, share, time.Unix(1001, 0))
	for _, i := range renewals {
		if wa, wc := a.warmer[i], c.warmer[i]; wa != wc || wa == "" {
			t.Errorf("shard %d: a gives it to %q, c to %q", i, wa, wc)
		}
	}
}

// survivor is replica a or c of count shards, whose peer is the other.
func survivor(id string, count int) *shardHolder {
	peer := map[string]string{"a": "c", "c": "a"}[id]
	return &shardHolder{id: id, count: count, peers: []string{peer}, warmer: map[int]string{}, freeSince: map[int]time.Time{}}
}

// permutations returns every order of s.
func permutations(s []int) [][]int {
	if len(s) <= 1 {
		return [][]int{slices.Clone(s)}
	}
	var out [][]int
	for n, first := range s {
		rest := slices.Concat(s[:n:n], s[n+1:])
		for _, p := range permutations(rest) {
			out = append(out, append([]int{first}, p...))
		}
	}
	return out
}

// TestCountMembers counts out a replica late to renew its member slot only while it renews no
// shard Lease on time either: one whose rounds of reads were slow still renews its shards. A
// replica late with every shard it holds is counted out before its slot is late.
func TestCountMembers(t *testing.T) {
	for name, tc := range map[string]struct {
		holders    map[int]shardLease
		slotOnTime bool // b renews its member slot on time
		wantPeers  []string
		wantGone   int
	}{
		"renews a shard on time":   {holders: map[int]shardLease{0: {holder: "b"}, 1: {holder: "a"}}, wantPeers: []string{"c", "b"}},
		"renews one of two":        {holders: map[int]shardLease{0: {holder: "b", late: true}, 1: {holder: "b"}}, wantPeers: []string{"c", "b"}},
		"late with all its shards": {holders: map[int]shardLease{0: {holder: "b", late: true}, 1: {holder: "a"}}, wantPeers: []string{"c"}, wantGone: 1},
		"holds no shard":           {holders: map[int]shardLease{0: {holder: "a"}, 1: {expired: true}}, wantPeers: []string{"c"}, wantGone: 1},
		// Its slot renewed in a round after its shards' last renewals: it died or was cut off.
		"slot on time, late with all its shards": {slotOnTime: true, holders: map[int]shardLease{0: {holder: "b", late: true}, 1: {holder: "b", late: true}, 2: {holder: "a"}}, wantPeers: []string{"c"}, wantGone: 1},
		"slot on time, late with one of two":     {slotOnTime: true, holders: map[int]shardLease{0: {holder: "b", late: true}, 1: {holder: "b"}}, wantPeers: []string{"c", "b"}},
		"slot on time, holds no shard":           {slotOnTime: true, holders: map[int]shardLease{0: {holder: "a"}, 1: {holder: "c"}}, wantPeers: []string{"c", "b"}},
	} {
		t.Run(name, func(t *testing.T) {
			// c renews its member slot on time, b is late to renew its own unless slotOnTime.
			peers, gone := countMembers([]shardLease{{holder: "c"}, {holder: "b", late: !tc.slotOnTime}}, tc.holders)
			if !slices.Equal(peers, tc.wantPeers) || gone != tc.wantGone {
				t.Errorf("countMembers = %v, %d gone; want %v, %d gone", peers, gone, tc.wantPeers, tc.wantGone)
			}
		})
	}
}
