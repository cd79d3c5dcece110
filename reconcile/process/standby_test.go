package process

import "testing"

// TestMembership counts a replica that stands by in while a member slot is vacant, whether it is
// this replica (a member gone) or another (fewer live members than slots), so that every replica
// gives it the gone member's shards; otherwise it holds nothing and is not counted.
func TestMembership(t *testing.T) {
	for name, tc := range map[string]struct {
		live, gone  int
		standby     bool
		standbyPeer string
		want        int
		wantIdle    bool
		wantPeer    bool
	}{
		"every slot held, none stands by":        {live: 3, want: 3},
		"a member gone, none stands by":          {live: 2, gone: 1, want: 2},
		"every slot held, another stands by":     {live: 3, standbyPeer: "s", want: 3},
		"a member gone, another stands by":       {live: 2, gone: 1, standbyPeer: "s", want: 3, wantPeer: true},
		"a slot released, another stands by":     {live: 2, standbyPeer: "s", want: 3, wantPeer: true},
		"every slot held, this one stands by":    {live: 3, standby: true, want: 3, wantIdle: true},
		"a member gone, this one stands by":      {live: 2, gone: 1, standby: true, want: 3},
		"slots read missing, this one stands by": {live: 0, standby: true, want: 1, wantIdle: true},
		"every member gone, this one stands by":  {live: 0, gone: 3, standby: true, want: 1},
		"every member gone, none stands by":      {live: 0, gone: 3, want: 1},
	} {
		t.Run(name, func(t *testing.T) {
			h := &shardHolder{count: 3, standby: tc.standby, standbyPeer: tc.standbyPeer}
			members, idle, withPeer := h.membership(tc.live, tc.gone)
			if members != tc.want || idle != tc.wantIdle || withPeer != tc.wantPeer {
				t.Errorf("membership(%d, %d gone) = %d, idle %v, with the peer %v; want %d, %v, %v", tc.live, tc.gone, members, idle, withPeer, tc.want, tc.wantIdle, tc.wantPeer)
			}
		})
	}
}
