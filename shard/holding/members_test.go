package holding

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCount counts the replicas that share three shards as one replica, "a", sees them. A
// replica late to renew its member slot is counted out only while it renews no shard Lease on
// time either (one whose rounds of reads were slow still renews its shards), and one late with
// every shard it holds is counted out before its slot is late. A replica that stands by is
// counted in while a slot is vacant, whether it is this one (a member gone) or another (fewer
// live members than slots); otherwise it holds nothing and is not counted.
func TestCount(t *testing.T) {
	onTime, late := Lease{Holder: "b"}, Lease{Holder: "b", Late: true}
	for name, tc := range map[string]struct {
		m    Members
		want Membership
	}{
		"alone":                           {Members{Member: true}, Membership{Members: 1, Share: 3}},
		"every slot held":                 {Members{Member: true, Others: []Lease{{Holder: "b"}, {Holder: "c"}}}, Membership{Members: 3, Share: 1, Peers: []string{"b", "c"}}},
		"every slot held, another stands": {Members{Member: true, StandbyPeer: "s", Others: []Lease{{Holder: "b"}, {Holder: "c"}}}, Membership{Members: 3, Share: 1, Peers: []string{"b", "c"}}},
		"a slot released, another stands": {Members{Member: true, StandbyPeer: "s", Others: []Lease{{Holder: "b"}}}, Membership{Members: 3, Share: 1, Peers: []string{"b", "s"}}},
		"b's slot late, a shard on time": {Members{Member: true, Others: []Lease{late}, Leases: map[int]Lease{0: onTime, 1: late}},
			Membership{Members: 2, Share: 2, Peers: []string{"b"}}},
		"b's slot late, holds no shard": {Members{Member: true, Others: []Lease{late}, Leases: map[int]Lease{0: {Holder: "a"}, 1: {Expired: true}}},
			Membership{Members: 1, Share: 3}},
		// b renewed its slot in a round after its shards' last renewals: it died or was cut off.
		"b's slot on time, late with every shard": {Members{Member: true, Others: []Lease{onTime}, Leases: map[int]Lease{0: late, 1: late, 2: {Holder: "a"}}},
			Membership{Members: 1, Share: 3}},
		"b's slot on time, holds no shard": {Members{Member: true, Others: []Lease{onTime}, Leases: map[int]Lease{0: {Holder: "a"}}},
			Membership{Members: 2, Share: 2, Peers: []string{"b"}}},
		"b gone, another stands by": {Members{Member: true, StandbyPeer: "s", Others: []Lease{late, {Holder: "c"}}, Leases: map[int]Lease{0: late}},
			Membership{Members: 3, Share: 1, Peers: []string{"c", "s"}}},
		"this one stands by, every slot held": {Members{Standby: true, Others: []Lease{{Holder: "b"}, {Holder: "c"}, {Holder: "d"}}},
			Membership{Members: 3, Share: 1, Peers: []string{"b", "c", "d"}, Idle: true}},
		"this one stands by, b gone": {Members{Standby: true, Others: []Lease{late, {Holder: "c"}, {Holder: "d"}}, Leases: map[int]Lease{0: late}},
			Membership{Members: 3, Share: 1, Peers: []string{"c", "d"}}},
		"this one stands by, slots read missing": {Members{Standby: true}, Membership{Members: 1, Share: 3, Idle: true}},
		"this one stands by, every member gone": {Members{Standby: true, Others: []Lease{late}, Leases: map[int]Lease{0: late}},
			Membership{Members: 1, Share: 3}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.m.Count = 3
			if diff := cmp.Diff(tc.want, Count(tc.m)); diff != "" {
				t.Errorf("Count (-want +got):\n%s", diff)
			}
		})
	}
}
