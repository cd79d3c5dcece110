package shard

import (
	"context"
	"testing"
	"time"
)

func TestTenure(t *testing.T) {
	var tenure Tenure
	t0 := time.Now()
	if tenure.Holds(t0) || !tenure.Until().IsZero() {
		t.Fatal("a tenure never extended holds")
	}
	tenure.Extend(t0, 10*time.Second)
	for _, tc := range []struct {
		name  string
		at    time.Time
		holds bool
	}{
		{"within", t0.Add(9 * time.Second), true},
		{"at its end", t0.Add(10 * time.Second), false},
		{"after", t0.Add(time.Minute), false},
	} {
		if got := tenure.Holds(tc.at); got != tc.holds {
			t.Errorf("%s: Holds %v, want %v", tc.name, got, tc.holds)
		}
	}
	// The two clocks disagree: a machine suspended (its monotonic clock stood still, its wall
	// clock went on), or a wall clock set back (the monotonic one went on).
	if tenure.holds(t0.Add(time.Second), t0.Add(time.Minute).Round(0)) {
		t.Error("holds after a suspend: by the monotonic clock within, by the wall clock a minute on")
	}
	if tenure.holds(t0.Add(time.Minute), t0.Add(-time.Hour).Round(0)) {
		t.Error("holds with the wall clock set back: by the monotonic clock a minute on")
	}
	if !tenure.holds(t0.Add(time.Second), t0.Add(time.Second).Round(0)) {
		t.Error("does not hold a second on by both clocks")
	}
	// A renewal that was sent earlier but answered later does not shorten it.
	tenure.Extend(t0.Add(-time.Second), 10*time.Second)
	if got := tenure.Until(); !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("moved back to %v", got)
	}
	tenure.Extend(t0.Add(2*time.Second), 10*time.Second)
	if got := tenure.Until(); !got.Equal(t0.Add(12 * time.Second)) {
		t.Errorf("Until %v, want 12 s after", got)
	}
	if TenureOf(context.Background()) != nil || TenureOf(WithTenure(context.Background(), &tenure)) != &tenure {
		t.Error("the context does not carry the tenure")
	}
}
