package holding

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestAssignLateAgrees gives two surviving replicas the Leases of a late holder's shards, c's
// read too slowly to see them late (already run out): each computes the same warmer for every
// shard, and no replica is given more than its share.
func TestAssignLateAgrees(t *testing.T) {
	for count := 2; count <= 6; count++ {
		t.Run(fmt.Sprintf("%d shards", count), func(t *testing.T) {
			holders := map[int]Lease{}
			for i := range count {
				// b is late with every third shard; a and c hold the rest in turn.
				holders[i] = Lease{Holder: []string{"b", "a", "c"}[i%3], Late: i%3 == 0}
			}
			share := (count + 1) / 2
			assigned := map[string]map[int]string{}
			for _, id := range []string{"a", "c"} {
				h := newSurvivor(id, count)
				view := holders
				if id == "c" {
					view = map[int]Lease{}
					for i, l := range holders {
						if l.Late {
							l = Lease{Expired: true}
						}
						view[i] = l
					}
				}
				h.assignLate(view, share)
				assigned[id] = h.warmer
			}
			load := map[string]int{}
			for i, l := range holders {
				if !l.Late {
					load[l.Holder]++
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
			holders := map[int]Lease{}
			for i := range count {
				holders[i] = Lease{Holder: []string{"b", "a", "c"}[i%3]}
			}
			holders[0] = Lease{Holder: "b", Late: true}
			h := newSurvivor("a", count)
			h.candidates = append(h.candidates, "b")
			h.assignLate(holders, (count+2)/3)
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
	round := func(judge func(i int, l Lease) Lease) map[int]Lease {
		holders := map[int]Lease{}
		for i := range count {
			l := Lease{Holder: []string{"b", "a", "c"}[i%3]}
			if n := slices.Index(renewals, i); n >= 0 {
				l = judge(n, Lease{Holder: "b", Renewed: time.Unix(990, 0).Add(time.Duration(n) * 100 * time.Millisecond)})
			}
			holders[i] = l
		}
		return holders
	}
	share := (count + 1) / 2
	a, c := newSurvivor("a", count), newSurvivor("c", count)
	a.assignLate(round(func(n int, l Lease) Lease { l.Late = true; return l }), share)
	c.assignLate(round(func(n int, l Lease) Lease { l.Late = n < k; return l }), share)
	ranOut := round(func(n int, l Lease) Lease { return Lease{Expired: true, Renewed: l.Renewed} })
	a.assignLate(ranOut, share)
	c.assignLate(ranOut, share)
	for _, i := range renewals {
		if wa, wc := a.warmer[i], c.warmer[i]; wa != wc || wa == "" {
			t.Errorf("shard %d: a gives it to %q, c to %q", i, wa, wc)
		}
	}
}

// survivor is replica a or c of count shards, whose peer is the other, with the warmers it gave
// at its last round.
type survivor struct {
	candidates []string
	count      int
	warmer     map[int]string
}

func newSurvivor(id string, count int) *survivor {
	peer := map[string]string{"a": "c", "c": "a"}[id]
	return &survivor{candidates: []string{id, peer}, count: count}
}

// assignLate is one round of the survivor's: Warmers over what it judged of the Leases.
func (s *survivor) assignLate(leases map[int]Lease, share int) {
	s.warmer = Warmers(s.count, share, leases, s.candidates, s.warmer)
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

// TestWarming stops a warm engine once its shard is held on time again or given to another
// warmer, but not a shard a holder hands over to this replica, and starts the late shards given
// to this replica that it does not warm or try yet.
func TestWarming(t *testing.T) {
	late := Lease{Holder: "b", Late: true}
	for name, tc := range map[string]struct {
		leases           map[int]Lease
		warmers          map[int]string
		joining          []int
		warm, tried      []int
		wantStop, wantGo []int
	}{
		"a late holder's shards given to this replica": {leases: map[int]Lease{0: late, 1: late, 2: {Holder: "a"}}, warmers: map[int]string{0: "a", 1: "c"}, wantGo: []int{0}},
		"already warm or tried":                        {leases: map[int]Lease{0: late, 1: late}, warmers: map[int]string{0: "a", 1: "a"}, warm: []int{0}, tried: []int{1}},
		"the holder renewed on time":                   {leases: map[int]Lease{0: {Holder: "b"}}, warmers: map[int]string{}, warm: []int{0}, wantStop: []int{0}},
		"given to another warmer now":                  {leases: map[int]Lease{0: late}, warmers: map[int]string{0: "c"}, warm: []int{0}, wantStop: []int{0}},
		"free, or taken by this replica":               {leases: map[int]Lease{0: {}, 1: {Holder: "a"}}, warm: []int{0, 1}},
		"handed over to this replica":                  {leases: map[int]Lease{0: {Holder: "b"}}, joining: []int{0}, warm: []int{0}},
		"standing aside: every warm engine stops":      {warm: []int{2, 0}, wantStop: []int{0, 2}},
	} {
		t.Run(name, func(t *testing.T) {
			stop, start := Warming("a", tc.leases, tc.warmers, tc.joining, tc.warm, tc.tried)
			if diff := cmp.Diff([][]int{tc.wantStop, tc.wantGo}, [][]int{stop, start}, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Warming (-want +got stop, start):\n%s", diff)
			}
		})
	}
}
