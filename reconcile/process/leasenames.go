package process

import (
	"strconv"

	"evals.si/operator/evalsi"
	"evals.si/operator/shard"
)

// The names of the operator's Leases, which the charts' RBAC and release-finalizers name too.

// ShardLease is the name of the Lease of shard s of the operator whose leader election name is
// name: name itself when the operator does not shard (as a single leader's Lease always was).
func ShardLease(name string, s shard.Shard) string {
	if s.IsWhole() {
		return name
	}
	return name + "-shard-" + strconv.Itoa(s.Index)
}

// MemberLease is the name of member slot j of the operator whose leader election name is name.
// A replica is counted while it holds a slot; there are as many slots as shards, since a
// replica beyond them would hold no shard (it waits for a slot, as a standby).
func MemberLease(name string, j int) string { return name + "-member-" + strconv.Itoa(j) }

// StandbyLease is the name of the Lease of the replica next in line for a member slot, when every
// slot is held (more replicas than shards). The replicas count it in for the shards of a member
// that is gone, so that those shards move once, to it, rather than to them and then again to it
// once it takes the gone member's slot. Replicas beyond it wait unseen.
func StandbyLease(name string) string { return name + "-standby" }

// OperatorLeases are the names of every Lease the replicas of an operator of count shards may
// write, whose leader election name is name: its one Lease when it does not shard; else each
// shard's, each member slot's and the standby's (the chart's RBAC names the same).
func OperatorLeases(name string, count int) []string {
	if count <= 1 {
		return []string{name}
	}
	var names []string
	for i := range count {
		names = append(names, ShardLease(name, shard.Shard{Index: i, Count: count}), MemberLease(name, i))
	}
	return append(names, StandbyLease(name))
}

// LabelShards on each of the operator's Leases is the number of shards of the replica that wrote
// it: replicas with another number slice the objects otherwise, and must not run beside it.
const LabelShards = evalsi.Group + "/shards"
