package process

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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

// TestObserveTimesEachVersionFromWhenItWasSeen: a Lease is judged from when this replica first
// saw its current version, so a renewal (a new version) starts the count again, and the first
// late Lease's end is kept for the next round's timer.
func TestObserveTimesEachVersionFromWhenItWasSeen(t *testing.T) {
	timings := LeaseTimings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	h := &shardHolder{id: "a", timings: timings, seen: map[string]observation{}}
	holder, seconds := "b", int32(4)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "shard-0-of-2", ResourceVersion: "7"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds}}
	start := time.Unix(1000, 0)
	h.observe(l, start)
	if got := h.observe(l, start.Add(2*time.Second)); !got.Late || !h.expires.Equal(start.Add(4*time.Second)) {
		t.Errorf("quiet for 2 s: %+v, runs out at %v; want late, at %v", got, h.expires, start.Add(4*time.Second))
	}
	l.ResourceVersion = "8" // renewed
	h.expires = time.Time{}
	if got := h.observe(l, start.Add(3*time.Second)); got.Late || got.Expired || !h.expires.IsZero() {
		t.Errorf("just renewed: %+v, runs out at %v; want held on time", got, h.expires)
	}
	if got := h.observe(l, start.Add(6*time.Second)); got.Expired || got.Holder != "b" {
		t.Errorf("3 s after the renewal was seen: %+v; want held by b", got)
	}
}
