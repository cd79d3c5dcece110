package process

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/shard/holding"
)

// TestObserve judges one version of a Lease at times after this replica first saw it: held, late,
// and, once it ran out, expired only while it still names another replica (a released Lease names
// no one; this replica's own is its own). Another replica's Lease carries its last renewal.
func TestObserve(t *testing.T) {
	timings := LeaseTimings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	first := time.Unix(1000, 0)
	renewed := time.Unix(990, 0) // by the holder's clock, which observe does not trust
	for name, tc := range map[string]struct {
		holder, warmed string
		after          time.Duration
		want           holding.Lease
	}{
		"a member slot that says which shards its replica warmed": {holder: "b", warmed: "2,5", after: time.Second, want: holding.Lease{Holder: "b", Renewed: renewed, Warmed: []int{2, 5}}},
		"renewed":                         {holder: "b", after: time.Second, want: holding.Lease{Holder: "b", Renewed: renewed}},
		"late: three retry periods quiet": {holder: "b", after: 2 * time.Second, want: holding.Lease{Holder: "b", Late: true, Renewed: renewed}},
		"ran out naming its holder":       {holder: "b", after: 5 * time.Second, want: holding.Lease{Expired: true, Renewed: renewed}},
		"released":                        {holder: "", after: 5 * time.Second, want: holding.Lease{}},
		"this replica's own":              {holder: "a", after: 5 * time.Second, want: holding.Lease{Holder: "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			h := &shardHolder{id: "a", timings: timings, seen: map[string]observation{}}
			seconds := int32(timings.LeaseDuration / time.Second)
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "shard-0-of-2", ResourceVersion: "7", Annotations: map[string]string{AnnotationWarmed: tc.warmed}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &tc.holder, LeaseDurationSeconds: &seconds, RenewTime: &metav1.MicroTime{Time: renewed}},
			}
			h.observe(l, first)
			if diff := cmp.Diff(tc.want, h.observe(l, first.Add(tc.after)), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("observe after %s (-want +got):\n%s", tc.after, diff)
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
