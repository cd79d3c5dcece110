package main

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestLeaseHeld decides when release-finalizers may act: only when the operator's Lease is gone
// or expired; a Lease it cannot read (Forbidden, a timeout) never counts as free.
func TestLeaseHeld(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	lease := func(holder string, renewed time.Duration) *coordinationv1.Lease {
		d := int32(15)
		at := metav1.NewMicroTime(now.Add(-renewed))
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &at, LeaseDurationSeconds: &d}}
	}
	leases := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	for name, tc := range map[string]struct {
		lease *coordinationv1.Lease
		err   error
		free  bool
	}{
		"not found":            {err: apierrors.NewNotFound(leases, "evalsi-operator"), free: true},
		"forbidden":            {err: apierrors.NewForbidden(leases, "evalsi-operator", errors.New("no")), free: false},
		"timeout":              {err: context.DeadlineExceeded, free: false},
		"server timeout":       {err: apierrors.NewServerTimeout(leases, "get", 1), free: false},
		"held":                 {lease: lease("pod-1", 5*time.Second), free: false},
		"expired":              {lease: lease("pod-1", 20*time.Second), free: true},
		"released (no holder)": {lease: lease("", time.Second), free: true},
	} {
		t.Run(name, func(t *testing.T) {
			why := leaseHeld(tc.lease, tc.err, now)
			if (why == nil) != tc.free {
				t.Errorf("leaseHeld = %v, want free=%v", why, tc.free)
			}
		})
	}
}
