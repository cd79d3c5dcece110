package holding

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestObserve judges one version of a Lease, first seen at since, at times after: held, late
// (and when it runs out), and, once it ran out, expired only while it still names another
// replica (a released Lease names no one; this replica's own is its own). Another replica's
// Lease carries its last renewal, by the holder's clock, which the judgement does not trust.
func TestObserve(t *testing.T) {
	const lease, late = 4 * time.Second, 1500 * time.Millisecond
	since := time.Unix(1000, 0)
	renewed := time.Unix(990, 0)
	for name, tc := range map[string]struct {
		holder, warmed string
		after          time.Duration
		want           Lease
		wantExpires    time.Time
	}{
		"a member slot that says which shards its replica warmed": {holder: "b", warmed: "2,5", after: time.Second, want: Lease{Holder: "b", Renewed: renewed, Warmed: []int{2, 5}}},
		"renewed":                       {holder: "b", after: time.Second, want: Lease{Holder: "b", Renewed: renewed}},
		"late: quiet longer than late":  {holder: "b", after: 2 * time.Second, want: Lease{Holder: "b", Late: true, Renewed: renewed}, wantExpires: since.Add(lease)},
		"ran out naming its holder":     {holder: "b", after: 5 * time.Second, want: Lease{Expired: true, Renewed: renewed}},
		"released":                      {holder: "", after: 5 * time.Second, want: Lease{}},
		"this replica's own, quiet too": {holder: "a", after: 5 * time.Second, want: Lease{Holder: "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			seconds := int32(lease / time.Second)
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "shard-0-of-2", ResourceVersion: "7", Annotations: map[string]string{AnnotationWarmed: tc.warmed}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &tc.holder, LeaseDurationSeconds: &seconds, RenewTime: &metav1.MicroTime{Time: renewed}},
			}
			got, expires := Observe(l, "a", since, since.Add(tc.after), late)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Observe after %s (-want +got):\n%s", tc.after, diff)
			}
			if !expires.Equal(tc.wantExpires) {
				t.Errorf("Observe after %s: runs out at %v, want %v", tc.after, expires, tc.wantExpires)
			}
		})
	}
}
