package process

import (
	"cmp"
	"fmt"
	"time"

	"k8s.io/client-go/tools/leaderelection"
)

// LeaseTimings are the timings of every Lease a replica holds: it renews each every RetryPeriod
// and gives up after RenewDeadline without a renewal; another replica may take the Lease
// LeaseDuration after its last renewal (ShardLeaseDuration for a shard's Lease). The margin
// between the last two is the time a holder that lost its Lease has to stop writing; the shard
// Lease's duration bounds how long a killed replica's shards wait for another.
type LeaseTimings struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ShardLeaseDuration is the duration of the shards' Leases (LeaseDuration when zero): the
	// member slots and the standby Lease count replicas, and keep LeaseDuration. Shorter, a
	// killed replica's shards are taken sooner; but a holder must renew within RenewDeadline,
	// which must be shorter still, so that an API server slow for that long makes it give up its
	// shards, and another take them with their engines started anew.
	ShardLeaseDuration time.Duration
}

// shardLease is the duration of the shards' Leases.
func (t LeaseTimings) shardLease() time.Duration {
	return cmp.Or(t.ShardLeaseDuration, t.LeaseDuration)
}

// DefaultLeaseTimings are those of Kubernetes' own controllers.
var DefaultLeaseTimings = LeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// Validate says what is wrong with t, naming the flag.
func (t LeaseTimings) Validate() error {
	switch {
	case t.RetryPeriod <= 0:
		return fmt.Errorf("--leader-elect-retry-period must be positive, not %s", t.RetryPeriod)
	case float64(t.RenewDeadline) <= leaderelection.JitterFactor*float64(t.RetryPeriod):
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be longer than %v times --leader-elect-retry-period (%s)", t.RenewDeadline, leaderelection.JitterFactor, t.RetryPeriod)
	case t.LeaseDuration <= t.RenewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s)", t.LeaseDuration, t.RenewDeadline)
	case t.LeaseDuration%time.Second != 0:
		return fmt.Errorf("--leader-elect-lease-duration must be whole seconds (a Lease counts in seconds), not %s", t.LeaseDuration)
	case t.shardLease() <= t.RenewDeadline:
		return fmt.Errorf("--shard-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s)", t.shardLease(), t.RenewDeadline)
	case t.shardLease()%time.Second != 0:
		return fmt.Errorf("--shard-lease-duration must be whole seconds (a Lease counts in seconds), not %s", t.shardLease())
	}
	return nil
}

// late is how long a Lease another replica holds may go without a renewal before this replica
// judges its holder late: three renewals missed, where one may be missed to the two replicas'
// reading and renewing out of step. A late holder's shards are warmed (shardHolder.warmLate).
func (t LeaseTimings) late() time.Duration { return 3 * t.RetryPeriod }

// warmerGrace is how long a replica whose rounds take up to round leaves a free shard to the
// replica that warmed it (leftToWarmer): two round periods, a period being a RetryPeriod and a
// round. Each replica judges a Lease run out a duration after its own first sight of the last
// renewal, so the warmer may see the Lease free up to a period after another replica, and takes
// it in its next round, up to a period later. With one RetryPeriod the two raced for it; on a
// busy machine a round of reads takes seconds (the rounds of other replicas are judged by this
// one's, against the same API server).
func (t LeaseTimings) warmerGrace(round time.Duration) time.Duration {
	return 2 * (t.RetryPeriod + round)
}
