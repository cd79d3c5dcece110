package process

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestObserve judges one version of a Lease at times after this replica first saw it: held, late,
// and, once it ran out, expired only while it still names another replica (a released Lease names
// no one; this replica's own is its own).
func TestObserve(t *testing.T) {
	timings := LeaseTimings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	first := time.Unix(1000, 0)
	for name, tc := range map[string]struct {
		holder string
		after  time.Duration
		want   shardLease
	}{
		"renewed":                         {holder: "b", after: time.Second, want: shardLease{holder: "b"}},
		"late: three retry periods quiet": {holder: "b", after: 2 * time.Second, want: shardLease{holder: "b", late: true}},
		"ran out naming its holder":       {holder: "b", after: 5 * time.Second, want: shardLease{expired: true}},
		"released":                        {holder: "", after: 5 * time.Second, want: shardLease{}},
		"this replica's own":              {holder: "a", after: 5 * time.Second, want: shardLease{holder: "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			h := &shardHolder{id: "a", timings: timings, seen: map[string]observation{}}
			seconds := int32(timings.LeaseDuration / time.Second)
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "shard-0-of-2", ResourceVersion: "7"},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &tc.holder, LeaseDurationSeconds: &seconds},
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
		after  time.Duration
		want   bool
	}{
		"this replica warms it":         {warmer: "a", peers: []string{"c"}, after: 0, want: false},
		"no warmer":                     {warmer: "", peers: []string{"c"}, after: 0, want: false},
		"the warmer is late too":        {warmer: "c", peers: nil, after: 0, want: false},
		"just seen free":                {warmer: "c", peers: []string{"c"}, after: 0, want: true},
		"the warmer read a round later": {warmer: "c", peers: []string{"c"}, after: timings.RetryPeriod + 200*time.Millisecond, want: true},
		"two rounds: the warmer failed": {warmer: "c", peers: []string{"c"}, after: 2 * timings.RetryPeriod, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			h := &shardHolder{id: "a", timings: timings, peers: tc.peers, warmer: map[int]string{}, freeSince: map[int]time.Time{0: seen}}
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
				peer := map[string]string{"a": "c", "c": "a"}[id]
				h := &shardHolder{id: id, count: count, peers: []string{peer}, warmer: map[int]string{}, freeSince: map[int]time.Time{}}
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
