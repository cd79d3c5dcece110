package holding

import (
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// AnnotationWarmed is the annotation of a replica's member slot that lists the shards it has
// warmed to take from their holders ("2,5"), whose engines have synced.
const AnnotationWarmed = "evals.si/warmed-shards"

// Observe returns l as replica self judges it at now, having first seen l's current version at
// since. No one holds it when it names no holder, or when that version has not changed (been
// renewed) for the Lease's duration: unlike its renewTime, this does not trust another machine's
// clock, as client-go's elector does not; a replica reads the Leases every RetryPeriod, so a
// killed holder's shard is taken about a Lease duration after its last renewal. A Lease that ran
// out still naming another replica is Expired: its holder stopped renewing it rather than
// released it. Another replica's Lease is Late once quiet for late; expires is then when it runs
// out (zero otherwise). The same arguments give the same judgement.
func Observe(l *coordinationv1.Lease, self string, since, now time.Time, late time.Duration) (judged Lease, expires time.Time) {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.LeaseDurationSeconds == nil {
		return Lease{}, time.Time{}
	}
	if *s.HolderIdentity == self {
		return Lease{Holder: self}, time.Time{}
	}
	duration := time.Duration(*s.LeaseDurationSeconds) * time.Second
	quiet := now.Sub(since)
	var renewed time.Time
	if s.RenewTime != nil {
		renewed = s.RenewTime.Time
	}
	if quiet > duration {
		return Lease{Expired: true, Renewed: renewed}, time.Time{}
	}
	judged = Lease{Holder: *s.HolderIdentity, Late: quiet > late, Renewed: renewed, Warmed: warmedOf(l)}
	if judged.Late {
		expires = since.Add(duration)
	}
	return judged, expires
}

// warmedOf returns the shards l's annotation lists as warmed.
func warmedOf(l *coordinationv1.Lease) []int {
	var out []int
	for f := range strings.SplitSeq(l.Annotations[AnnotationWarmed], ",") {
		if i, err := strconv.Atoi(f); err == nil {
			out = append(out, i)
		}
	}
	return out
}
