package holding

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestHandOver keeps a shard for a joiner until the joiner's member slot says it warmed it, or a
// wait has passed since the holder first would have drained it; then lets it go, saying which.
func TestHandOver(t *testing.T) {
	const wait = 15 * time.Second
	now := time.Unix(1000, 0)
	joinerWarmed := []Lease{{Holder: "j", Warmed: []int{2}}}
	for name, tc := range map[string]struct {
		would  []int
		others []Lease
		since  map[int]time.Time
		want   Handover
	}{
		"nothing to drain": {want: Handover{Since: map[int]time.Time{}}},
		"just over its share: kept for the joiner": {would: []int{2}, others: []Lease{{Holder: "j"}},
			want: Handover{Keep: []int{2}, Since: map[int]time.Time{2: now}}},
		"the joiner says it warmed it": {would: []int{2}, others: joinerWarmed, since: map[int]time.Time{2: now.Add(-time.Second)},
			want: Handover{Release: []Release{{2, true}}, Since: map[int]time.Time{2: now.Add(-time.Second)}}},
		"warmed at once, first round": {would: []int{2}, others: joinerWarmed,
			want: Handover{Release: []Release{{2, true}}, Since: map[int]time.Time{2: now}}},
		"waited a Lease duration without": {would: []int{2, 4}, others: joinerWarmed, since: map[int]time.Time{4: now.Add(-wait)},
			want: Handover{Release: []Release{{2, true}, {4, false}}, Since: map[int]time.Time{2: now, 4: now.Add(-wait)}}},
		"a shard no longer over the share is forgotten": {would: []int{4}, since: map[int]time.Time{2: now.Add(-time.Hour), 4: now.Add(-time.Second)},
			want: Handover{Keep: []int{4}, Since: map[int]time.Time{4: now.Add(-time.Second)}}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, HandOver(tc.would, tc.others, tc.since, now, wait)); diff != "" {
				t.Errorf("HandOver (-want +got):\n%s", diff)
			}
		})
	}
}
