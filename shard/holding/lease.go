// Package holding decides which of an operator's shards a replica holds, from what it reads of
// their Leases: who holds each Lease now (LeaseHolder, which the uninstall hook reads Leases
// through too), how a replica judges another's Lease (Observe), how many replicas share the
// shards and their share (Count), which shards a replica takes, drains or lets go at each round
// (Decide), when it lets one go to a joiner (HandOver), which replica warms each shard of a late
// holder (Warmers) or of a holder over its share (Joining), and which warm engines start and stop
// (Warming). Its functions are pure: the Lease protocol that reads and writes the Leases, and the
// engines that run the shards, are package process's.
package holding

import (
	"fmt"
	"hash/fnv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// LeaseHolder returns who holds l at now by its own renewTime, or "" when no one does: no holder,
// or not renewed within its duration. The replicas judge each other's Leases by their own clocks
// instead (package process); this is for a reader that sees a Lease once, such as the uninstall
// hook waiting for the operator to let go of it.
func LeaseHolder(l *coordinationv1.Lease, now time.Time) string {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return ""
	}
	if now.After(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)) {
		return ""
	}
	return *s.HolderIdentity
}

// Lease is a Lease of the operator's (a shard's or a replica's member slot) as a replica judges it
// at a round.
type Lease struct {
	// Holder is the replica that holds it, "" when it is free.
	Holder string
	// Late is whether another replica holds it but has not renewed it for a while: it may be
	// gone, and its shard is warmed by another (Warmers).
	Late bool
	// Expired is whether the Lease is free because another replica stopped renewing it (it ran
	// out still naming that replica), not because it was released.
	Expired bool
	// Renewed is the Lease's spec.renewTime when another replica holds it or held it until it ran
	// out: every replica reads the same, and a dead holder's shards go late for each replica in
	// the order of their last renewals (Warmers).
	Renewed time.Time
	// Warmed are, on a member slot, the shards its replica has warmed to take from the replicas
	// that hand them over to it (Joining); the holders drain those at once (Round.HoldBack).
	Warmed []int
}

// Rendezvous is the rendezvous hash of replica id and shard i: each replica prefers the shards
// that hash best with its identity, so replicas started together try different shards first.
func Rendezvous(id string, i int) uint64 {
	f := fnv.New64a()
	fmt.Fprintf(f, "%s/%d", id, i)
	return f.Sum64()
}
