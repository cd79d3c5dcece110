package bench

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/evalsi"
	operatorprocess "evals.si/operator/reconcile/process"
	"evals.si/operator/shard"
)

// TestHeldByTheLastLeaseWriter judges writes as BenchmarkShards does, from audit events alone:
// a write is its replica's to make only while the last successful write of its object's shard
// Lease named that replica. Two replicas that both believe they hold a shard are told apart.
func TestHeldByTheLastLeaseWriter(t *testing.T) {
	const ns = "bench-shards"
	uidIn := func(s shard.Shard) string {
		for i := range 1000 {
			if uid := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i); s.Contains(uid) {
				return uid
			}
		}
		t.Fatalf("no UID in %s", s)
		return ""
	}
	first, second := shard.Shard{Index: 0, Count: 2}, shard.Shard{Index: 1, Count: 2}
	t0 := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	lease := func(s shard.Shard, holder string, completed int, code int) auditEvent {
		l := coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: operatorprocess.ShardLease(evalsi.LeaderElectionID, s), Labels: map[string]string{operatorprocess.LabelShards: "2"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}
		body, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		ev := auditEvent{Verb: "update", Completed: at(completed), RequestObject: body}
		ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name = "leases", ns, l.Name
		ev.ResponseStatus.Code = code
		return ev
	}
	events := []auditEvent{
		lease(first, "a", 10, 200),
		lease(first, "a", 20, 200),
		lease(first, "b", 25, 409), // b's try while a holds it: refused, so it names no one
		lease(first, "", 30, 200),  // a releases it
		lease(first, "b", 40, 200),
		lease(second, "c", 10, 200),
		{ObjectRef: struct{ Resource, Namespace, Name, Subresource string }{"leases", ns, evalsi.LeaderElectionID + "-member-0", ""}},
	}
	leases := leaseHolders(events, ns, evalsi.LeaderElectionID)
	in0, in1 := uidIn(first), uidIn(second)
	got := map[string]bool{}
	for _, w := range []struct {
		replica, uid string
		at           int
	}{
		{"a", in0, 5}, {"a", in0, 11}, {"a", in0, 26}, {"b", in0, 26}, {"a", in0, 31}, {"b", in0, 35},
		{"b", in0, 41}, {"a", in0, 41}, {"a", in1, 15}, {"c", in1, 15}, {"c", in0, 15},
	} {
		got[fmt.Sprintf("%s writes shard %d at %d", w.replica, map[string]int{in0: 0, in1: 1}[w.uid], w.at)] = leases.heldBy(w.replica, w.uid, at(w.at))
	}
	want := map[string]bool{
		"a writes shard 0 at 5":  false, // before it took the Lease
		"a writes shard 0 at 11": true,
		"a writes shard 0 at 26": true,
		"b writes shard 0 at 26": false, // believes it holds it; its write of the Lease was refused
		"a writes shard 0 at 31": false, // after it released it
		"b writes shard 0 at 35": false, // free: no one holds it
		"b writes shard 0 at 41": true,
		"a writes shard 0 at 41": false,
		"a writes shard 1 at 15": false,
		"c writes shard 1 at 15": true,
		"c writes shard 0 at 15": false,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("held (-want +got):\n%s", diff)
	}
}
