package evalsid

import (
	"fmt"
	"testing"
	"time"
)

// TestAbsentNamespacesAreBounded: the namespaces believed absent are forgotten after absentFor,
// and never more than absentKept are kept: a full set drops its expired entries, or all of them
// when none has expired.
func TestAbsentNamespacesAreBounded(t *testing.T) {
	var c Cluster
	t0 := time.Unix(1_800_000_000, 0)
	c.markAbsent("gone", t0)
	if !c.believedAbsent("gone", t0.Add(absentFor-time.Second)) || c.believedAbsent("gone", t0.Add(absentFor)) {
		t.Error("a namespace is believed absent for other than absentFor")
	}
	for i := range absentKept - 1 { // beside "gone", a full set
		c.markAbsent(fmt.Sprint("old-", i), t0)
	}
	later := t0.Add(absentFor)
	c.markAbsent("new", later)
	if len(c.absent) != 1 || !c.believedAbsent("new", later) {
		t.Errorf("a full set whose entries expired keeps %d entries, want the new one only", len(c.absent))
	}
	for i := range absentKept - 1 { // beside "new", a full set
		c.markAbsent(fmt.Sprint("fresh-", i), later)
	}
	c.markAbsent("newest", later)
	if len(c.absent) != 1 || !c.believedAbsent("newest", later) {
		t.Errorf("a full set of unexpired entries keeps %d entries, want the newest only", len(c.absent))
	}
}
