package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/reconcile/process"
	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
)

// TestShardedReplicas runs two replicas of the operator over three shards: together they hold
// every shard, each Evaluator is reconciled (its children carry its bucket), the API server
// answers each shard's List with exactly the owners shard.Contains picks, and when one replica
// stops, the other takes its shards and repairs what changes in them; the last to stop releases
// every Lease.
func TestShardedReplicas(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	const n, shards = 12, 3
	createJudges(t, ctx, ns, n)
	start := func(name string, count int) (stop func()) {
		return startReplica(t, ctx, ns, name, process.Config{Shards: count}, io.Discard)
	}
	stopA := start("replica-a", shards)
	stopB := start("replica-b", shards)
	waitJudgesAvailable(t, ctx, ns, n)
	cs := env.Clientset()
	holders := func() ([]string, error) {
		var out []string
		for i := range shards {
			l, err := cs.CoordinationV1().Leases(ns).Get(ctx, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: shards}), metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			h := holding.LeaseHolder(l, time.Now())
			if h == "" {
				return nil, fmt.Errorf("shard %d has no holder", i)
			}
			out = append(out, h)
		}
		return out, nil
	}
	clustertest.Eventually(t, ctx, "the two replicas share the shards", func() error {
		h, err := holders()
		if err != nil {
			return err
		}
		if slices.Sort(h); len(slices.Compact(h)) != 2 {
			return fmt.Errorf("shards held by %v", h)
		}
		return nil
	})
	// Started together, they counted each other before taking shards: none was taken by one and
	// handed over to the other.
	for i := range shards {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: shards}), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := l.Spec.LeaseTransitions; n != nil && *n != 0 {
			t.Errorf("shard %d's Lease changed holder %d times while the replicas started", i, *n)
		}
	}

	evaluators := env.Dynamic().Resource(evalsi.Evaluators).Namespace(ns)
	all, err := evaluators.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		s := shard.Shard{Index: i, Count: shards}
		got, err := evaluators.List(ctx, metav1.ListOptions{ShardSelector: s.Selector()})
		if err != nil {
			t.Fatalf("listing shard %s: %v", s, err)
		}
		var want, have []string
		for _, o := range all.Items {
			if s.Contains(string(o.GetUID())) {
				want = append(want, o.GetName())
			}
		}
		for _, o := range got.Items {
			have = append(have, o.GetName())
		}
		slices.Sort(want)
		slices.Sort(have)
		if !slices.Equal(want, have) {
			t.Errorf("shard %s: the API server's shardSelector answers %v, shard.Contains picks %v", s, have, want)
		}
	}
	for _, o := range all.Items {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, o.GetName()+"-evaluator", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.Labels[evalsi.LabelShardBucket], fmt.Sprint(shard.Bucket(string(o.GetUID()))); got != want {
			t.Errorf("%s's Deployment has bucket %q, its owner %q", o.GetName(), got, want)
		}
	}

	// A replica given another number of shards slices the objects otherwise: it takes nothing
	// while these run (its log says why), neither its own Leases nor theirs.
	stopC := start("replica-c", 2)
	for range 4 {
		time.Sleep(2 * time.Second)
		h, err := holders()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Sort(h); len(slices.Compact(h)) != 2 {
			t.Fatalf("with a replica of two shards beside them, the shards are held by %v", h)
		}
		other, err := cs.CoordinationV1().Leases(ns).Get(ctx, process.ShardLease("evalsi-operator", shard.Shard{Index: 1, Count: 2}), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := other.Labels[process.LabelShards]; got != "3" {
			t.Fatalf("shard 1's Lease was taken by a replica of %s shards", got)
		}
	}
	stopC()

	stopA()
	clustertest.Eventually(t, ctx, "the replica left holds every shard", func() error {
		h, err := holders()
		if err != nil {
			return err
		}
		if slices.Sort(h); len(slices.Compact(h)) != 1 {
			return fmt.Errorf("shards held by %v", h)
		}
		return nil
	})
	deleteEveryPool(t, ctx, ns, n, "every pool repaired")
	stopB()
	for i := range shards {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: shards}), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := holding.LeaseHolder(l, time.Now()); h != "" {
			t.Errorf("shard %d still held by %s after every replica stopped", i, h)
		}
	}
}

// TestStoppedReplicasShardGoesToTheStandby runs three replicas over two shards: two hold a shard
// each, the third stands by on the standby Lease. When one of the two stops (a rolling update),
// its shard goes to the standby, which takes its member slot; the other keeps its own shard and
// takes no other, so the stopped replica's shard moves once.
func TestStoppedReplicasShardGoesToTheStandby(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	createJudges(t, ctx, ns, 4)
	const shards = 2
	timings := process.LeaseTimings{LeaseDuration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	logs := map[string]*syncBuffer{}
	stops := map[string]func(){}
	health := map[string]string{}
	for _, name := range []string{"replica-a", "replica-b", "replica-c"} {
		logs[name] = &syncBuffer{}
		health[name] = freeAddr(t)
		stops[name] = startReplica(t, ctx, ns, name, process.Config{Shards: shards, Identity: name, Lease: timings, HealthAddr: health[name]}, logs[name])
	}
	t.Cleanup(func() {
		if t.Failed() {
			for name, l := range logs {
				t.Logf("%s's log:\n%s", name, l.String())
			}
		}
	})
	holder := func(name string) (string, error) { return leaseHolder(ctx, ns, name) }
	stopped, other, standby := twoMembersAndStandby(t, ctx, ns)
	waitJudgesAvailable(t, ctx, ns, 4)

	// Readiness does not flap at the handover: the standby and the other member, once each is
	// ready, stay ready while the standby takes the stopped replica's shard and syncs it.
	ready := map[string]*readiness{}
	for _, name := range []string{other, standby} {
		waitReadyz(t, ctx, name, health[name])
		ready[name] = watchReadiness(t, ctx, health[name])
	}
	before := len(logs[other].String())
	stops[stopped]()
	clustertest.Eventually(t, ctx, "the standby holding the stopped replica's shard and a member slot", func() error {
		h, err := holder(process.ShardLease("evalsi-operator", shard.Shard{Index: 0, Count: shards}))
		if err != nil {
			return err
		}
		if h != standby {
			return fmt.Errorf("shard 0 held by %q, not the standby %s", h, standby)
		}
		for j := range shards {
			if m, err := holder(process.MemberLease("evalsi-operator", j)); err != nil || m == standby {
				return err
			}
		}
		return errors.New("the standby holds no member slot")
	})
	time.Sleep(2 * timings.RetryPeriod) // a round for the other to count the standby in
	if l := logs[other].String()[before:]; strings.Contains(l, `msg="holding a shard"`) || strings.Contains(l, `msg="draining a shard`) {
		t.Errorf("%s took or handed over a shard when %s stopped:\n%s", other, stopped, l)
	}
	deleteEveryPool(t, ctx, ns, 4, "the pools repaired by the two left")
	for name, r := range ready {
		if polls, failed := r.stop(); failed != "" || polls == 0 {
			t.Errorf("%s's /readyz during the handover: %d polls, %s", name, polls, failed)
		}
	}
}

// waitReadyz waits until the replica serving health answers /readyz with 200.
func waitReadyz(t *testing.T, ctx context.Context, name, health string) {
	t.Helper()
	clustertest.Eventually(t, ctx, name+"'s /readyz answering 200", func() error {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return nil
	})
}

// readiness polls a replica's /readyz until stopped and keeps the first answer that was not 200.
type readiness struct {
	done   chan struct{}
	ended  chan struct{}
	polls  int
	failed string
}

// watchReadiness polls health's /readyz every 50 ms, from now until stop; a test's deadline
// bounds it.
func watchReadiness(t *testing.T, ctx context.Context, health string) *readiness {
	t.Helper()
	r := &readiness{done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(r.ended)
		for {
			select {
			case <-r.done:
				return
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := http.Get("http://" + health + "/readyz")
			if err != nil {
				r.failed = cmp.Or(r.failed, err.Error())
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r.polls++
			if resp.StatusCode != http.StatusOK {
				r.failed = cmp.Or(r.failed, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body))))
			}
		}
	}()
	return r
}

// stop ends the polling and returns how many answers came and the first that was not ready.
func (r *readiness) stop() (polls int, failed string) {
	close(r.done)
	<-r.ended
	return r.polls, r.failed
}

// TestShardCountChangedByARollingUpdate changes the number of shards from three to two as a
// rolling update does: replicas of the new number start while the old ones still hold every
// shard, and take nothing until the last old one stops; then they share the new shards and
// reconcile every object. No object is left to no one, and no replica of the old number writes
// beside one of the new.
func TestShardCountChangedByARollingUpdate(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	const n = 8
	createJudges(t, ctx, ns, n)
	timings := process.LeaseTimings{LeaseDuration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	logs := map[string]*syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			for name, l := range logs {
				t.Logf("%s's log:\n%s", name, l.String())
			}
		}
	})
	start := func(name string, shards int) (stop func()) {
		logs[name] = &syncBuffer{}
		return startReplica(t, ctx, ns, name, process.Config{Shards: shards, Identity: name, Lease: timings}, logs[name])
	}
	// holders returns the holder of each of count shards: of its Lease, when a replica of count
	// shards holds it ("" for none; shard i's Lease is the same for every number, labelled with
	// its holder's).
	holders := func(count int) ([]string, error) {
		var out []string
		for i := range count {
			l, err := env.Clientset().CoordinationV1().Leases(ns).Get(ctx, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: count}), metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				out = append(out, "")
			case err != nil:
				return nil, err
			case l.Labels[process.LabelShards] != strconv.Itoa(count):
				out = append(out, "")
			default:
				out = append(out, holding.LeaseHolder(l, time.Now()))
			}
		}
		return out, nil
	}
	// heldBy fails unless every shard of count is held, each by one of names.
	heldBy := func(count int, names ...string) error {
		h, err := holders(count)
		if err != nil {
			return err
		}
		for i, holder := range h {
			if !slices.Contains(names, holder) {
				return fmt.Errorf("shard %d of %d held by %q, want one of %v", i, count, holder, names)
			}
		}
		return nil
	}
	stopA := start("old-a", 3)
	stopB := start("old-b", 3)
	clustertest.Eventually(t, ctx, "the old replicas holding the three shards", func() error { return heldBy(3, "old-a", "old-b") })
	waitJudgesAvailable(t, ctx, ns, n)

	start("new-a", 2)
	stopA()
	clustertest.Eventually(t, ctx, "the old replica left holding every shard", func() error { return heldBy(3, "old-b") })
	start("new-b", 2)
	time.Sleep(4 * timings.RetryPeriod) // rounds for the new replicas to take something, if they would
	if h, err := holders(2); err != nil || slices.ContainsFunc(h, func(s string) bool { return s != "" }) {
		t.Fatalf("while a replica of three shards runs, the shards of two are held by %v (%v)", h, err)
	}

	stopB()
	clustertest.Eventually(t, ctx, "the new replicas sharing the two shards", func() error {
		if err := heldBy(2, "new-a", "new-b"); err != nil {
			return err
		}
		if h, _ := holders(2); h[0] == h[1] {
			return fmt.Errorf("both shards held by %s", h[0])
		}
		return nil
	})
	if h, err := holders(3); err != nil || slices.ContainsFunc(h, func(s string) bool { return s != "" }) {
		t.Errorf("the old shards are still held by %v once the old replicas stopped (%v)", h, err)
	}
	deleteEveryPool(t, ctx, ns, n, "every pool repaired by the new replicas")
}

// TestFewerShardsWaitForEveryOldShard changes the number of shards from three to two while the
// old replica left holds only the third shard, whose Lease the new number does not have: it holds
// all three, then is kept from the first two shards' Leases (its requests for them fail) until
// they run out, as an old replica slow to take over its stopped peer's shards leaves them. The new
// replica must still take nothing while it holds that shard (their objects overlap: shard 2 of 3
// is half of shard 1 of 2), and take both once it stops.
func TestFewerShardsWaitForEveryOldShard(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	createJudges(t, ctx, ns, 4)
	timings := process.LeaseTimings{LeaseDuration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	old := startCuttableReplicas(t, ctx, ns, []string{"old"}, process.Config{Shards: 3, Lease: timings})["old"]
	old3 := func(i int) string { return process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: 3}) }
	clustertest.Eventually(t, ctx, "the old replica holding the three shards", func() error {
		for i := range 3 {
			if h, err := leaseHolder(ctx, ns, old3(i)); err != nil || h != "old" {
				return fmt.Errorf("shard %d of 3 held by %q (%v)", i, h, err)
			}
		}
		return nil
	})
	old.keptFrom.Store(&[]string{old3(0), old3(1)})
	clustertest.Eventually(t, ctx, "the first two shards' Leases run out, the third held", func() error {
		for i, want := range []string{"", "", "old"} {
			if h, err := leaseHolder(ctx, ns, old3(i)); err != nil || h != want {
				return fmt.Errorf("shard %d of 3 held by %q (%v)", i, h, err)
			}
		}
		return nil
	})

	startCuttableReplicas(t, ctx, ns, []string{"new"}, process.Config{Shards: 2, Lease: timings})
	// A replica counts a Lease held for a Lease duration from its first sight of it: then rounds
	// for the new replica to take the free shards, if it would.
	time.Sleep(timings.LeaseDuration + 6*timings.RetryPeriod)
	for i := range 2 {
		if h, err := leaseHolder(ctx, ns, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: 2})); err != nil || h == "new" {
			t.Fatalf("the new replica took shard %d of 2 while the old one holds shard 2 of 3 (%v)", i, err)
		}
	}
	old.stop()
	clustertest.Eventually(t, ctx, "the new replica holding both shards", func() error {
		for i := range 2 {
			if h, err := leaseHolder(ctx, ns, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: 2})); err != nil || h != "new" {
				return fmt.Errorf("shard %d of 2 held by %q (%v)", i, h, err)
			}
		}
		return nil
	})
	deleteEveryPool(t, ctx, ns, 4, "every pool repaired by the new replica")
}

// createJudges creates n Evaluators of the default spec in ns, judge-0 to judge-(n-1).
func createJudges(t *testing.T, ctx context.Context, ns string, n int) {
	t.Helper()
	for i := range n {
		create(t, ctx, evalsi.Evaluators, ns, "Evaluator", fmt.Sprintf("judge-%d", i), map[string]any{})
	}
}

// waitJudgesAvailable waits until the n Evaluators of createJudges are Ready, their pools
// Available.
func waitJudgesAvailable(t *testing.T, ctx context.Context, ns string, n int) {
	t.Helper()
	for i := range n {
		waitReady(t, ctx, evalsi.Evaluators, ns, fmt.Sprintf("judge-%d", i), "True", "Available")
	}
}

// leaseHolder returns the holder of ns's Lease name, "" when it is free or has run out.
func leaseHolder(ctx context.Context, ns, name string) (string, error) {
	l, err := env.Clientset().CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return holding.LeaseHolder(l, time.Now()), nil
}

// twoMembersAndStandby waits until three replicas over two shards of ns share them: it returns
// the holders of shard 0 and shard 1, and the replica holding the standby Lease.
func twoMembersAndStandby(t *testing.T, ctx context.Context, ns string) (first, second, standby string) {
	t.Helper()
	clustertest.Eventually(t, ctx, "two replicas holding a shard each, the third standing by", func() error {
		var held []string
		for i := range 2 {
			h, err := leaseHolder(ctx, ns, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: 2}))
			if err != nil {
				return err
			}
			held = append(held, h)
		}
		s, err := leaseHolder(ctx, ns, process.StandbyLease("evalsi-operator"))
		if err != nil {
			return err
		}
		if held[0] == "" || held[1] == "" || held[0] == held[1] || s == "" || slices.Contains(held, s) {
			return fmt.Errorf("shards held by %v, the standby Lease by %q", held, s)
		}
		first, second, standby = held[0], held[1], s
		return nil
	})
	return first, second, standby
}

// startReplica runs a replica of the operator named name over ns, electing its shards' Leases
// with pc and logging to log, until stop is called or the test ends; stop reports the replica's
// error.
func startReplica(t *testing.T, ctx context.Context, ns, name string, pc process.Config, log io.Writer) (stop func()) {
	t.Helper()
	return startReplicaRecording(t, ctx, ns, name, pc, log, nil)
}

// startReplicaRecording is startReplica recording into metrics (its own when nil).
func startReplicaRecording(t *testing.T, ctx context.Context, ns, name string, pc process.Config, log io.Writer, metrics *engine.Metrics) (stop func()) {
	t.Helper()
	rc := rest.CopyConfig(env.Config)
	rc.UserAgent = name
	pc.LeaderElect, pc.LeaderElectionNamespace, pc.LeaderElectionName = true, ns, "evalsi-operator"
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- RunManager(mctx, ManagerConfig{
			Engine: Config{Rest: rc, Namespace: ns, Render: testOptions, DiscoveryInterval: 300 * time.Millisecond,
				Log: slog.New(slog.NewTextHandler(log, nil)), Metrics: metrics},
			Config: pc,
		})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err, ok := clustertest.Await(t, name, done); ok && err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestCutOffReplicasShardsAreWarmedThenTaken runs replicas with short Leases, over one shard (two
// replicas: one leads, the other stands by), two and three (as many replicas, each holding one)
// and six (three replicas holding two each), then cuts the holder of the first shard off from the
// API server, as a killed or partitioned replica is: the others see it late to renew, one of them
// warms each of its shards (lists and watches it, writing nothing) while the Lease runs out, then
// takes it and reconciles with the warm engine, repairing its pools. With six shards each
// survivor has room for one of the two: they must agree which. With two shards over three
// replicas, the third stands by: it warms and takes the cut-off shard, and the other replica's
// shard stays where it is (each shard moves once). Then the cut heals: the replica takes back its
// share (or stands by), and writes an object only once it holds the object's shard.
func TestCutOffReplicasShardsAreWarmedThenTaken(t *testing.T) {
	t.Parallel() // see envMu

	for _, tc := range []struct{ shards, replicas int }{{1, 2}, {2, 2}, {3, 3}, {6, 3}, {2, 3}} {
		t.Run(fmt.Sprintf("%d shards over %d replicas", tc.shards, tc.replicas), func(t *testing.T) {
			t.Parallel()
			cutOffReplica(t, tc.shards, tc.replicas)
		})
	}
}

func cutOffReplica(t *testing.T, shards, replicaCount int) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	const n = 8
	createJudges(t, ctx, ns, n)
	cs := env.Clientset()
	// A survivor warms a shard once it has seen the holder late (three RetryPeriods without a
	// renewal) and before the Lease runs out: 4.5 s between the two leave room for rounds of
	// Lease reads that take seconds under the race detector beside the package's other tests
	// (with a 4 s Lease, 2.5 s were too few in a CI run: no one warmed, both took their shard cold).
	timings := process.LeaseTimings{LeaseDuration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	var names []string
	for i := range replicaCount {
		names = append(names, fmt.Sprintf("replica-%c", 'a'+i))
	}
	replicas := startCuttableReplicas(t, ctx, ns, names, process.Config{Shards: shards, Lease: timings})
	// The victim holds the first shard, and its fair share of the others; each other replica
	// holds its share, or stands by.
	var victim string
	var cut []shard.Shard
	var holders []string // of each shard, before the cut
	clustertest.Eventually(t, ctx, "the replicas share the shards", func() error {
		victim, cut, holders = "", nil, nil
		for i := range shards {
			s := shard.Shard{Index: i, Count: shards}
			l, err := cs.CoordinationV1().Leases(ns).Get(ctx, process.ShardLease("evalsi-operator", s), metav1.GetOptions{})
			if err != nil {
				return err
			}
			h := holding.LeaseHolder(l, time.Now())
			if i == 0 {
				victim = h
			}
			if h != "" && h == victim {
				cut = append(cut, s)
			}
			holders = append(holders, h)
		}
		if slices.Contains(holders, "") || len(slices.Compact(slices.Sorted(slices.Values(holders)))) != min(shards, replicaCount) {
			return fmt.Errorf("shards held by %v", holders)
		}
		return nil
	})
	survivors := slices.DeleteFunc(slices.Clone(names), func(name string) bool { return name == victim })
	waitJudgesAvailable(t, ctx, ns, n)

	replicas[victim].cut.Store(true)
	before := map[string]map[string]float64{} // a survivor may have held the victim's shard at the start
	for _, name := range survivors {
		before[name] = shardMoves(t, replicas[name].metrics)
	}
	// since are the moves a survivor made with s since the cut.
	since := func(name string, s shard.Shard, mv string) float64 {
		return shardMoves(t, replicas[name].metrics)[s.String()+" "+mv] - before[name][s.String()+" "+mv]
	}
	all, err := env.Dynamic().Resource(evalsi.Evaluators).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, o := range all.Items {
		if slices.ContainsFunc(cut, func(s shard.Shard) bool { return s.Contains(string(o.GetUID())) }) {
			if err := cs.AppsV1().Deployments(ns).Delete(ctx, o.GetName()+"-evaluator", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	// The Lease first: with no Evaluator in the cut shard, the pools are "repaired" at once. A
	// replica takes a Lease before it counts that it took the shard: its count is waited for too.
	takers := map[shard.Shard]string{}
	clustertest.Eventually(t, ctx, "the cut-off replica's shards held by the others", func() error {
		for _, s := range cut {
			l, err := cs.CoordinationV1().Leases(ns).Get(ctx, process.ShardLease("evalsi-operator", s), metav1.GetOptions{})
			if err != nil {
				return err
			}
			h := holding.LeaseHolder(l, time.Now())
			if !slices.Contains(survivors, h) {
				return fmt.Errorf("shard %s held by %q", s, h)
			}
			if since(h, s, "took_warm")+since(h, s, "took_cold") == 0 {
				return fmt.Errorf("%s holds shard %s's Lease and has not counted it yet", h, s)
			}
			takers[s] = h
		}
		return nil
	})
	clustertest.Eventually(t, ctx, "the cut-off replica's pools repaired by the others", func() error {
		l, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) != n {
			return fmt.Errorf("%d of %d Deployments (%d deleted)", len(l.Items), n, deleted)
		}
		return nil
	})
	// judgedLate reports whether another survivor than name warmed a shard name held at the
	// cut because name was late to renew its Lease.
	judgedLate := func(name string) bool {
		for i, h := range holders {
			s := shard.Shard{Index: i, Count: shards}
			if h == name && slices.ContainsFunc(survivors, func(other string) bool { return other != name && since(other, s, "warmed_late") > 0 }) {
				return true
			}
		}
		return false
	}
	for _, s := range cut {
		var warmers []string
		excused := 0 // warmers judged late themselves, whose shard another survivor took
		for _, name := range survivors {
			if since(name, s, "warmed_late") == 0 {
				continue
			}
			warmers = append(warmers, name)
			switch {
			case takers[s] != name && judgedLate(name):
				// The warmer was slow to renew its own shards (a loaded machine): another survivor
				// counted it gone, as holding.Count does a replica late on every shard it holds, and
				// took the shard without waiting for it. Safe, only cold.
				t.Logf("%s warmed shard %s and was judged late itself; %s took the shard", name, s, takers[s])
				excused++
			case takers[s] != name:
				t.Errorf("%s warmed shard %s, and %s took it", name, s, takers[s])
			case since(name, s, "took_warm") == 0:
				// Its warm engine was left unused.
				t.Errorf("%s took shard %s with a new engine, not the warm one", name, s)
			}
		}
		// One survivor warms the shard and takes it. A warmer judged late may be one more: the
		// survivor that judged it so warmed the shard too (or took it cold, having seen no one
		// else warming it).
		if unexcused := len(warmers) - excused; unexcused != 1 && (excused == 0 || unexcused != 0) {
			t.Errorf("shard %s warmed by %v (%d of them judged late), want one of %v", s, warmers, excused, survivors)
		}
	}
	if shards > 1 {
		// Each shard moves once: no survivor hands a shard over once the others hold the member
		// slots they will hold (a replica that stood by takes the cut-off one's).
		clustertest.Eventually(t, ctx, "the survivors holding their member slots", func() error {
			held := 0
			for j := range shards {
				l, err := cs.CoordinationV1().Leases(ns).Get(ctx, process.MemberLease("evalsi-operator", j), metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					continue // more slots than replicas
				}
				if err != nil {
					return err
				}
				if slices.Contains(survivors, holding.LeaseHolder(l, time.Now())) {
					held++
				}
			}
			if want := min(shards, len(survivors)); held != want {
				return fmt.Errorf("%d member slots held by the survivors, want %d", held, want)
			}
			return nil
		})
		time.Sleep(2 * timings.RetryPeriod) // a round for each to count the others again
		for _, name := range survivors {
			for i := range shards {
				if s := (shard.Shard{Index: i, Count: shards}); since(name, s, "drained") > 0 {
					t.Errorf("%s drained shard %s after the cut", name, s)
				}
			}
		}
	}

	// The cut heals: the replica finds its shards held by the others, counts itself in again and
	// takes back its share, which the others hand over. It writes an object only once it holds
	// the object's shard: pools deleted once it holds its share again make it write.
	r := replicas[victim]
	r.recording.Store(true)
	r.cut.Store(false)
	share := shards / replicaCount
	held := map[int]time.Time{} // the victim's shards, by when it took them
	clustertest.Eventually(t, ctx, "the healed replica holding its share again", func() error {
		clear(held)
		for i := range shards {
			l, err := cs.CoordinationV1().Leases(ns).Get(ctx, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: shards}), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if holding.LeaseHolder(l, time.Now()) == victim && l.Spec.AcquireTime != nil {
				held[i] = l.Spec.AcquireTime.Time
			}
		}
		if len(held) != share {
			return fmt.Errorf("it holds %d shards, want %d", len(held), share)
		}
		return nil
	})
	deleteEveryPool(t, ctx, ns, n, "the pools repaired after the heal")
	shardOf := shardsOfEvaluators(t, ctx, ns, shards)
	r.mu.Lock()
	writes := slices.Clone(r.writes)
	r.mu.Unlock()
	checkWritesOfHeldShards(t, "the healed replica", writes, shardOf, held)
	owned := 0
	for _, i := range shardOf {
		if _, ok := held[i]; ok {
			owned++
		}
	}
	if owned > 0 && len(writes) == 0 {
		t.Errorf("the healed replica holds %d shards with %d Evaluators and repaired none of their pools", share, owned)
	}
}

// cuttableReplica is a replica of the operator whose requests to the API server fail while cut
// is set, as a killed or partitioned replica's do (it cannot release its Leases), and which
// records its object writes while recording is set.
type cuttableReplica struct {
	cut atomic.Bool
	// keptFrom, when set, are Leases whose requests fail, as cut makes every request fail.
	keptFrom atomic.Pointer[[]string]
	logs     syncBuffer
	// metrics are what the replica records, its shard moves among them (shardMoves).
	metrics *engine.Metrics
	// stop stops the replica and waits until it has stopped.
	stop func()
	// writes are the object writes (not of Leases or Events) the replica sends once recording is
	// set, and when.
	recording atomic.Bool
	mu        sync.Mutex
	writes    []objectWrite
}

// startCuttableReplicas runs a cuttableReplica of each name over ns, electing its shards' Leases
// with pc (its identity the name), until it is stopped or the test ends; their logs are shown if
// the test fails.
func startCuttableReplicas(t *testing.T, ctx context.Context, ns string, names []string, pc process.Config) map[string]*cuttableReplica {
	t.Helper()
	replicas := map[string]*cuttableReplica{}
	t.Cleanup(func() {
		if t.Failed() {
			for name, r := range replicas {
				t.Logf("%s's log:\n%s", name, r.logs.String())
			}
		}
	})
	for _, name := range names {
		r := &cuttableReplica{metrics: engine.NewMetrics()}
		replicas[name] = r
		rc := rest.CopyConfig(env.Config)
		rc.UserAgent = name
		rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				if r.cut.Load() {
					return nil, errors.New("cut off from the API server")
				}
				if kept := r.keptFrom.Load(); kept != nil && slices.ContainsFunc(*kept, func(name string) bool { return strings.HasSuffix(req.URL.Path, "/leases/"+name) }) {
					return nil, errors.New("kept from the Lease")
				}
				if r.recording.Load() && isObjectWrite(req) {
					r.mu.Lock()
					r.writes = append(r.writes, objectWrite{path: req.URL.Path, at: time.Now()})
					r.mu.Unlock()
				}
				return rt.RoundTrip(req)
			})
		})
		pc := pc
		pc.LeaderElect, pc.LeaderElectionNamespace, pc.LeaderElectionName, pc.Identity = true, ns, "evalsi-operator", name
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			// A cut-off replica cannot release its Leases; it may end with an error.
			_ = RunManager(mctx, ManagerConfig{
				Engine: Config{Rest: rc, Namespace: ns, Render: testOptions, DiscoveryInterval: 300 * time.Millisecond,
					Log: slog.New(slog.NewTextHandler(&r.logs, nil)), Metrics: r.metrics},
				Config: pc,
			})
		}()
		var once sync.Once
		r.stop = func() {
			once.Do(func() {
				cancel()
				clustertest.Await(t, "a replica", done)
			})
		}
		t.Cleanup(r.stop)
	}
	return replicas
}

// TestMemberAndStandbyCutOffTogether runs three replicas over two shards (two members, one
// standing by) and cuts off a member and the standby at once, as when the node under both dies.
// The others count the standby in for the member's shard until its Lease runs out; then the one
// replica left takes that shard too (cold: no one warmed it) and repairs its pools. Nothing is
// left unreconciled.
func TestMemberAndStandbyCutOffTogether(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	const n, shards = 6, 2
	createJudges(t, ctx, ns, n)
	timings := process.LeaseTimings{LeaseDuration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	names := []string{"replica-a", "replica-b", "replica-c"}
	replicas := startCuttableReplicas(t, ctx, ns, names, process.Config{Shards: shards, Lease: timings})
	member, survivor, standby := twoMembersAndStandby(t, ctx, ns)
	waitJudgesAvailable(t, ctx, ns, n)

	replicas[member].cut.Store(true)
	replicas[standby].cut.Store(true)
	cutAt := time.Now()
	clustertest.Eventually(t, ctx, "both shards held by the one replica left", func() error {
		for i := range shards {
			h, err := leaseHolder(ctx, ns, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: shards}))
			if err != nil {
				return err
			}
			if h != survivor {
				return fmt.Errorf("shard %d held by %q, not %s", i, h, survivor)
			}
		}
		return nil
	})
	t.Logf("%s and the standby %s cut off; %s held both shards %v later", member, standby, survivor, time.Since(cutAt).Round(100*time.Millisecond))
	deleteEveryPool(t, ctx, ns, n, "every pool repaired by the replica left")
}

// shardMoves reads the evalsi_shard_moves_total series of a replica's metrics, by "shard move"
// ("1/2 took_warm").
func shardMoves(t *testing.T, m *engine.Metrics) map[string]float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "evalsi_shard_moves_total" {
			continue
		}
		for _, series := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range series.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["shard"]+" "+labels["move"]] = series.GetCounter().GetValue()
		}
	}
	return out
}

// shardsOfEvaluators returns the shard, of shards, of each Evaluator of ns by name.
func shardsOfEvaluators(t *testing.T, ctx context.Context, ns string, shards int) map[string]int {
	t.Helper()
	all, err := env.Dynamic().Resource(evalsi.Evaluators).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, o := range all.Items {
		for i := range shards {
			if (shard.Shard{Index: i, Count: shards}).Contains(string(o.GetUID())) {
				out[o.GetName()] = i
			}
		}
	}
	return out
}

// isObjectWrite reports whether req writes an object a shard's holder may write: a request
// other than a read, but for the Leases the replicas contend on, Events, and access reviews
// (a replica asks whether it may watch a kind: a question, which changes nothing).
func isObjectWrite(req *http.Request) bool {
	p := req.URL.Path
	return req.Method != http.MethodGet && !strings.Contains(p, "/leases/") && !strings.HasSuffix(p, "/leases") &&
		!strings.Contains(p, "/events") && !strings.HasPrefix(p, "/apis/authorization.k8s.io/")
}

// checkWritesOfHeldShards fails t for each of replica's writes that is not of an Evaluator of a
// shard it holds (shardOf, held: when it took each), or that came before it took that shard.
func checkWritesOfHeldShards(t *testing.T, replica string, writes []objectWrite, shardOf map[string]int, held map[int]time.Time) {
	t.Helper()
	for _, w := range writes {
		i, ok := shardOf[w.owner()]
		if !ok {
			t.Errorf("%s wrote %s, of no Evaluator", replica, w.path)
			continue
		}
		took, ok := held[i]
		switch {
		case !ok:
			t.Errorf("%s wrote %s at %s, of shard %d, which it does not hold", replica, w.path, w.at.Format(time.StampMicro), i)
		case w.at.Before(took):
			t.Errorf("%s wrote %s at %s, of shard %d, before it took the shard at %s", replica, w.path, w.at.Format(time.StampMicro), i, took.Format(time.StampMicro))
		}
	}
}

// deleteEveryPool deletes every Deployment of ns and waits until the operator made all n again.
func deleteEveryPool(t *testing.T, ctx context.Context, ns string, n int, what string) {
	t.Helper()
	cs := env.Clientset()
	if err := cs.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, what, func() error {
		l, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) != n {
			return fmt.Errorf("%d of %d Deployments", len(l.Items), n)
		}
		return nil
	})
}

// objectWrite is a request that writes an object, and when it was sent.
type objectWrite struct {
	path string
	at   time.Time
}

// owner is the name of the Evaluator that w writes: the Evaluator itself (or its status), or one
// of its children, named after it.
func (w objectWrite) owner() string {
	parts := strings.Split(w.path, "/")
	i := slices.Index(parts, "namespaces")
	if i < 0 || i+3 >= len(parts) {
		return ""
	}
	return strings.TrimSuffix(parts[i+3], "-evaluator")
}

// roundTripperFunc is a function as an http.RoundTripper.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestShardLeasesHaveTheirOwnDuration runs two replicas over two shards with a shard Lease
// shorter than the member slots' Leases: each shard's Lease carries the shard duration, each
// member slot the other, and both are held.
func TestShardLeasesHaveTheirOwnDuration(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	timings := process.LeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond, ShardLeaseDuration: 5 * time.Second}
	startReplica(t, ctx, ns, "replica-a", process.Config{Shards: 2, Lease: timings}, io.Discard)
	startReplica(t, ctx, ns, "replica-b", process.Config{Shards: 2, Lease: timings}, io.Discard)
	want := map[string]int32{}
	for i := range 2 {
		want[process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: 2})] = 5
		want[process.MemberLease("evalsi-operator", i)] = 15
	}
	clustertest.Eventually(t, ctx, "the shards' Leases and the member slots held, each with its duration", func() error {
		got := map[string]int32{}
		for name := range want {
			l, err := env.Clientset().CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if holding.LeaseHolder(l, time.Now()) == "" || l.Spec.LeaseDurationSeconds == nil {
				return fmt.Errorf("Lease %s is not held", name)
			}
			got[name] = *l.Spec.LeaseDurationSeconds
		}
		if diff := gocmp.Diff(want, got); diff != "" {
			return fmt.Errorf("durations (-want +got):\n%s", diff)
		}
		return nil
	})
}

// TestJoinerTakesItsShardWarm runs one replica over two shards, then starts a second: the first
// keeps the shard it will hand over while the joiner warms it (lists and watches it, writing
// nothing), and drains it once the joiner says in its member slot that it has; the joiner takes
// it with its warm engine. The Lease duration is long, so a drain after the wait's bound (a Lease
// duration) would say the joiner was not waited for.
func TestJoinerTakesItsShardWarm(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	const n, shards = 8, 2
	createJudges(t, ctx, ns, n)
	timings := process.LeaseTimings{LeaseDuration: 40 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	a, b := engine.NewMetrics(), engine.NewMetrics()
	startReplicaRecording(t, ctx, ns, "replica-a", process.Config{Shards: shards, Lease: timings}, io.Discard, a)
	waitJudgesAvailable(t, ctx, ns, n)
	startReplicaRecording(t, ctx, ns, "replica-b", process.Config{Shards: shards, Lease: timings}, io.Discard, b)
	var taken string // the shard the joiner took
	clustertest.Eventually(t, ctx, "the joiner holds a shard", func() error {
		for m, times := range shardMoves(t, b) {
			if s, mv, _ := strings.Cut(m, " "); times > 0 && (mv == "took_warm" || mv == "took_cold") {
				taken = s
				return nil
			}
		}
		return errors.New("it holds none")
	})
	bMoves, aMoves := shardMoves(t, b), shardMoves(t, a)
	if bMoves[taken+" warmed_handover"] != 1 {
		t.Errorf("the joiner did not warm shard %s, which it took: %v", taken, bMoves)
	}
	if bMoves[taken+" took_warm"] != 1 {
		t.Errorf("the joiner took shard %s cold: %v", taken, bMoves)
	}
	if aMoves[taken+" handed_over_warmed"] != 1 || aMoves[taken+" handed_over_unwarmed"] != 0 {
		t.Errorf("the holder did not hand shard %s over once the joiner said it warmed it: %v", taken, aMoves)
	}
	deleteEveryPool(t, ctx, ns, n, "every pool repaired by the two replicas")
}

// TestShardedReplicaCountsItsOwnRequestsApart scrapes a replica of two shards: its Lease rounds'
// requests are counted under shard="process", each shard's engine's under its shard, and no
// series names the whole ("0/1"), which a sharded replica never runs.
func TestShardedReplicaCountsItsOwnRequestsApart(t *testing.T) {
	t.Parallel() // see envMu
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	createJudges(t, ctx, ns, 2)
	var logs syncBuffer
	startReplica(t, ctx, ns, "replica-m", process.Config{Shards: 2, MetricsAddr: "127.0.0.1:0"}, &logs)
	waitJudgesAvailable(t, ctx, ns, 2)
	_, after, ok := strings.Cut(logs.String(), "endpoint=metrics address=")
	if !ok {
		t.Fatalf("no metrics address in the log:\n%s", logs.String())
	}
	addr, _, _ := strings.Cut(after, " ")
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var leases, shards []string
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, "evalsi_") {
			continue
		}
		if strings.Contains(line, `shard="0/1"`) {
			t.Errorf("a series of the whole in a sharded replica: %s", line)
		}
		if strings.HasPrefix(line, "evalsi_kube_requests_total{") && strings.Contains(line, `resource="leases"`) {
			leases = append(leases, line)
		}
		if strings.HasPrefix(line, "evalsi_kube_requests_total{") && strings.Contains(line, `shard="1/2"`) {
			shards = append(shards, line)
		}
	}
	if len(leases) == 0 || !slices.ContainsFunc(leases, func(l string) bool { return strings.Contains(l, `shard="process"`) }) {
		t.Errorf("the Lease rounds' requests are not counted under shard=\"process\": %q", leases)
	}
	if len(shards) == 0 {
		t.Error("no request counted under shard 1/2's label")
	}
}
