package process

import (
	"strings"
	"testing"
	"time"
)

// TestLeaseTimingsAreChecked gives the timings a user might get wrong: each is refused with the
// flag named; the defaults and a shorter set pass.
func TestLeaseTimingsAreChecked(t *testing.T) {
	for name, tc := range map[string]struct {
		timings LeaseTimings
		want    string // "" for valid
	}{
		"defaults":                        {DefaultLeaseTimings, ""},
		"shorter":                         {LeaseTimings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}, ""},
		"no retry period":                 {LeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second}, "--leader-elect-retry-period"},
		"renew deadline within a retry":   {LeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 2 * time.Second}, "--leader-elect-renew-deadline"},
		"lease no longer than renewing":   {LeaseTimings{LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}, "--leader-elect-lease-duration"},
		"lease in part of a second":       {LeaseTimings{LeaseDuration: 15500 * time.Millisecond, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}, "whole seconds"},
		"a shorter shard Lease":           {LeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: time.Second, ShardLeaseDuration: 6 * time.Second}, ""},
		"shard Lease within renewing":     {LeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ShardLeaseDuration: 8 * time.Second}, "--shard-lease-duration (8s)"},
		"shard Lease in part of a second": {LeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ShardLeaseDuration: 12500 * time.Millisecond}, "--shard-lease-duration must be whole seconds"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.timings.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
