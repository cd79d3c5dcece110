package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	operatorprocess "evals.si/operator/reconcile/process"
	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
)

var (
	shardEvaluators = flag.Int("shard-evaluators", 10000, "Evaluators of BenchmarkShards")
	shardRuns       = flag.Int("shard-runs", 500, "running EvalRuns of BenchmarkShards, beside the Evaluators")
	shardCounts     = flag.String("shards", "1,2,3", "numbers of shards BenchmarkShards runs, each with as many replicas, over the same objects")
	shardKills      = flag.Int("kills", 5, "SIGKILLs of a replica with the largest number of shards")
)

// BenchmarkShards runs the operator over the same Evaluators and EvalRuns with 1, 2 and 3 shards
// (as many replicas), and reports each replica's live heap, its CPU while every owner and every
// Deployment changes once (the watch events it receives and reconciles; all of it, and the part
// above what it spends idle), and how long the replicas take to reconcile every object after
// they start. With the most shards it then kills one replica -kills times (SIGKILL, then a new
// one in its place), deletes 100 of its pools' Deployments right after, and reports how long
// the others took to reconcile every owner of its shards and make those Deployments again. Over
// all of it, the API server's audit log must show each write of an object received while its
// writer was the holder its shard's Lease last named (0 double writers, judged from the audit log
// alone), evalsid must hold one run per EvalRun, counted there, and each EvalRun must keep the
// run it has (0 duplicate runs).
func BenchmarkShards(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	setup(b, ctx)
	var counts []int
	for _, s := range strings.Split(*shardCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || shard.Validate(n) != nil {
			b.Fatalf("-shards: %q is not a number of shards", s)
		}
		counts = append(counts, n)
	}
	op := *operatorBin
	if op == "" {
		op = clustertest.Operator(b)
	}
	for range b.N {
		benchShards(b, ctx, op, counts)
	}
}

func benchShards(b *testing.B, ctx context.Context, op string, counts []int) {
	const ns = "bench-shards"
	createNamespace(b, ctx, ns)
	place := placeProcesses(b)
	place.enter(b)
	defer place.leave(b)
	fmt.Printf("placement: %s\n", place)
	// What is measured here needs no pod (steady state is converged children and statuses): run
	// it with -pods=false, which starts no ReplicaSet controller.
	evalsid, apiAddr, metricsAddr, apiToken := startEvalsid(b, ctx, op)
	defer evalsid.stop()
	s := &shardBench{b: b, ctx: ctx, op: op, ns: ns, apiAddr: apiAddr, apiToken: apiToken, evalsidMetrics: metricsAddr, from: mark(), prom: startPrometheus(b, ctx, ns), place: place}
	defer s.prom.stop()
	started := time.Now()

	// The objects, made and converged by one replica.
	first := s.startReplicas(1)
	w := watchNamespace(b, ctx, ns)
	s.w = w
	client := benchClient(b)
	if err := parallel(*shardEvaluators, creators, func(i int) error {
		_, err := client.Resource(evalsi.Evaluators).Namespace(ns).Create(ctx, evaluator(ns, i), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating Evaluators: %v", err)
	}
	runs := dynamicinformer.NewFilteredDynamicSharedInformerFactory(env.Dynamic(), 0, ns, nil).ForResource(evalsi.EvalRuns).Informer()
	go runs.Run(ctx.Done())
	createRunning(b, ctx, first[0].process, client.Resource(evalsi.EvalRuns).Namespace(ns), runs.GetStore(), *shardRuns, "run")
	wait(b, ctx, first[0].process, "converged", func() bool { return w.converged(*shardEvaluators) })
	s.waitSettled(w)
	runIDs := runIDsOf(runs.GetStore().List())
	s.stopReplicas(first)
	s.readObjects()

	var rows []shardRow
	var replicas []*replica
	for i, n := range counts {
		if i > 0 {
			s.stopReplicas(replicas)
		}
		var row shardRow
		row, replicas = s.measure(n)
		rows = append(rows, row)
		if n == slices.Max(counts) && n > 1 {
			rows[len(rows)-1].kills = s.kill(replicas, *shardKills)
		}
	}
	changed := 0
	for key, id := range runIDsOf(runs.GetStore().List()) {
		if runIDs[key] != id {
			changed++
		}
	}
	// The runs evalsid holds, counted there: one per EvalRun, whatever the replicas believed.
	held, err := runsAtEvalsid(ctx, s.evalsidMetrics, ns)
	if err != nil {
		b.Fatal(err)
	}
	doubles, checked, err := s.doubleWriters()
	if err != nil {
		b.Fatal(err)
	}
	caption := fmt.Sprintf("BenchmarkShards: %d Evaluators and %d running EvalRuns; shards %v, each with as many replicas; %d SIGKILLs", *shardEvaluators, *shardRuns, counts, *shardKills)
	if !*pods {
		caption += "; -pods=false: no pod runs, so no Evaluator is Ready"
	}
	s.prom.draw(b, ctx, started, time.Now(), caption)
	fmt.Print(shardTable(rows, len(s.uids), len(runIDs)))
	fmt.Printf("audit log: %d writes of owners and children by the replicas, %d received while their writer was not the holder its shard's Lease last named; evalsid holds %d runs for %d EvalRuns; EvalRuns whose run changed: %d\n",
		checked, doubles, held, len(runIDs), changed)
	if doubles > 0 || held != len(runIDs) || changed > 0 {
		b.Errorf("%d double writes, %d runs at evalsid for %d EvalRuns, %d EvalRuns whose run changed", doubles, held, len(runIDs), changed)
	}
	// The EvalRuns' finalizer is released by the replicas that hold their shards: the namespace
	// is deleted while the last ones run. It is slow, not stuck: 2,000 Evaluators' namespace
	// (about 17,000 objects) took 3.7 minutes; at 10,000 the namespace controller's
	// DeleteCollections timed out at 60 s and it deleted in passes (the test control plane now
	// runs 8 delete workers, not measured at this size).
	deleteNamespace(b, ctx, ns, 30*time.Minute)
	for _, r := range replicas {
		r.stop()
	}
}

// shardBench is the state of one BenchmarkShards run.
type shardBench struct {
	b                 *testing.B
	ctx               context.Context
	op, ns            string
	apiAddr, apiToken string
	// evalsidMetrics is the address of evalsid's metrics, where its runs are counted.
	evalsidMetrics string
	from           auditMark
	w              *namespaceWatch
	uids           map[string]string // the owners' UIDs by "kind/name"
	ownersByBucket [shard.Buckets]int
	churns         int // the measures' churns so far
	// prom scrapes the replicas for the dashboard's picture (nil without -dashboard); started
	// counts the replicas started, to name them.
	prom    *promServer
	started int
	// place is where the replicas run (-pin).
	place placement
}

// replica is a running replica of the operator.
type replica struct {
	*process
	identity string
}

// startReplicas starts n replicas with n shards and waits until each holds one.
func (s *shardBench) startReplicas(n int) []*replica {
	c := contender{name: "evalsi-operator", short: "operator", reconciles: "evalsi_reconcile_total",
		args: func(kubeconfig, ns, metrics, pprof string) []string {
			return []string{s.op, "run", "--kubeconfig=" + kubeconfig, "--namespace=" + ns,
				"--controllers=evaluator,evalrun", "--leader-elect", "--leader-election-namespace=" + ns,
				"--shards=" + strconv.Itoa(n), "--log-level=info", "--log-format=json",
				"--metrics-bind-address=" + metrics, "--pprof-bind-address=" + pprof, "--health-probe-bind-address=0",
				"--default-image=" + image, "--api-url=http://" + s.apiAddr, "--api-token-file=" + s.apiToken}
		},
		launcher: s.place.start}
	var out []*replica
	for range n {
		r := s.startReplica(c)
		out = append(out, r)
	}
	s.waitBalanced(out)
	return out
}

// startReplica starts one replica of c and reads its identity from its log.
func (s *shardBench) startReplica(c contender) *replica {
	r := &replica{process: start(s.b, s.ctx, c, s.ns)}
	wait(s.b, s.ctx, r.process, "logging its identity", func() bool {
		for _, l := range r.logLines() {
			if l.Msg == "holding shards" {
				r.identity = l.Identity
				return true
			}
		}
		return false
	})
	s.started++
	s.prom.scrape(r.metrics, fmt.Sprintf("replica-%d", s.started))
	return r
}

// waitBalanced waits until every replica holds one shard.
func (s *shardBench) waitBalanced(replicas []*replica) {
	for _, r := range replicas {
		wait(s.b, s.ctx, r.process, "holding one shard", func() bool {
			held, err := r.gauge("evalsi_shards_held")
			return err == nil && held == 1
		})
	}
}

// stopReplicas stops replicas (SIGTERM) and records what they held.
func (s *shardBench) stopReplicas(replicas []*replica) {
	for _, r := range replicas {
		r.stop()
	}
}

// logLine is what the benchmark reads of a replica's JSON log.
type logLine struct {
	Time     time.Time `json:"time"`
	Msg      string    `json:"msg"`
	Shard    string    `json:"shard"`
	Identity string    `json:"identity"`
	// Warm is, on "holding a shard", whether the replica had warmed the shard before it took it.
	Warm bool `json:"warm"`
}

func (r *replica) logLines() []logLine {
	f, err := os.Open(r.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// gauge reads a metric of one series.
func (r *replica) gauge(name string) (float64, error) {
	families, err := r.scrape()
	if err != nil {
		return 0, err
	}
	f := families[name]
	if f == nil || len(f.GetMetric()) == 0 {
		return 0, fmt.Errorf("no %s", name)
	}
	return f.GetMetric()[0].GetGauge().GetValue(), nil
}

// readObjects records the owners' UIDs and how many fall in each bucket.
func (s *shardBench) readObjects() {
	s.uids = map[string]string{}
	for _, k := range []string{"Evaluator", "EvalRun"} {
		gvr := evalsi.Evaluators
		if k == "EvalRun" {
			gvr = evalsi.EvalRuns
		}
		list, err := env.Dynamic().Resource(gvr).Namespace(s.ns).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			s.b.Fatal(err)
		}
		for _, o := range list.Items {
			s.uids[k+"/"+o.GetName()] = string(o.GetUID())
			s.ownersByBucket[shard.Bucket(string(o.GetUID()))]++
		}
	}
}

// owners returns how many owners shards of count hold.
func (s *shardBench) owners(count int, shards ...int) int {
	n := 0
	for b, owners := range s.ownersByBucket {
		for _, i := range shards {
			if (shard.Shard{Index: i, Count: count}).Contains(bucketUID(b)) {
				n += owners
			}
		}
	}
	return n
}

// bucketUIDs are a UID of each bucket, to ask a shard whether it holds the bucket.
var bucketUIDs = func() [shard.Buckets]string {
	var out [shard.Buckets]string
	found := 0
	for i := 0; found < shard.Buckets; i++ {
		uid := fmt.Sprintf("bucket-%d", i)
		if b := shard.Bucket(uid); out[b] == "" {
			out[b] = uid
			found++
		}
	}
	return out
}()

func bucketUID(b int) string { return bucketUIDs[b] }

// shardRow is one number of shards' figures.
type shardRow struct {
	shards int
	// start is how long the replicas took, from their start, to reconcile every object.
	start time.Duration
	// heap and churnCPU are each replica's live heap (allocated right after a collection) and
	// CPU during the churn. churnOverIdle is the part of churnCPU above what the replica spends
	// idle (its CPU per second while quiet, right after the churn, times the churn's window):
	// the CPU of the watch events themselves, without the Lease rounds, the run follower and
	// the scrapes that each replica pays whatever its share.
	heap          []float64
	churnCPU      []time.Duration
	churnOverIdle []time.Duration
	// kills are the times the others took to reconcile a killed replica's objects.
	kills []time.Duration
}

// measure starts n replicas with n shards over the objects and measures them.
func (s *shardBench) measure(n int) (shardRow, []*replica) {
	row := shardRow{shards: n}
	t0 := time.Now()
	replicas := s.startReplicas(n)
	s.waitReconciled(replicas, nil)
	row.start = time.Since(t0)
	s.waitQuiet(replicas)
	for i, r := range replicas {
		h, err := r.liveHeap(fmt.Sprintf("shards-%d-replica-%d", n, i))
		if err != nil {
			s.b.Fatal(err)
		}
		// The runtime's count right after the collection, as BenchmarkOperatorVsPeer reports
		// first: the heap profile's estimate is sampled, with a standard error of about 4 MiB
		// at 40 MiB, more than the differences between numbers of shards.
		row.heap = append(row.heap, h.allocated)
	}
	// The churn: every Evaluator and every pool Deployment changes once (a label: a Deployment's
	// annotation would be a new generation for the Deployment controller to roll out), which each
	// replica receives for its shard (the API server's shardSelector, the bucket label) and
	// reconciles.
	cpu0, churnFrom := make([]time.Duration, len(replicas)), time.Now()
	var profiled []<-chan struct{} // with -profiles, each replica's CPU profile of the churn's first -profile-seconds
	reconciles0 := make([]float64, len(replicas))
	for i, r := range replicas {
		cpu0[i] = r.cpu()
		reconciles0[i], _, _ = r.work("evaluator")
		profiled = append(profiled, profile(s.b, r.process, fmt.Sprintf("shards-%d-replica-%d-churn", n, i), *profileSeconds))
	}
	client := benchClient(s.b)
	// A new value at each measure, so that a number of shards measured twice (-shards=1,1) churns
	// again.
	s.churns++
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"bench.evals.si/churn":"%d"}}}`, s.churns))
	if err := parallel(*shardEvaluators, creators, func(i int) error {
		name := evaluator(s.ns, i).GetName()
		if _, err := client.Resource(evalsi.Evaluators).Namespace(s.ns).Patch(s.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		_, err := client.Resource(evalsi.Deployments).Namespace(s.ns).Patch(s.ctx, name+"-evaluator", types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}); err != nil {
		s.b.Fatalf("churning: %v", err)
	}
	marks := s.waitQuiet(replicas)
	for _, p := range profiled {
		<-p
	}
	for i, q := range marks {
		churn := q.cpu - cpu0[i]
		row.churnCPU = append(row.churnCPU, churn)
		row.churnOverIdle = append(row.churnOverIdle, churn-time.Duration(q.idle*float64(q.at.Sub(churnFrom))))
		// How many reconciles the churn's events made: two per Evaluator (its own event and its
		// Deployment's), as many for one replica as for two shards in the run that counted them,
		// so that a difference in CPU is one of cost per reconcile, not of reconciles.
		reconciles, _, _ := replicas[i].work("evaluator")
		fmt.Fprintf(os.Stderr, "%d shards, replica %d: churn window %.1f s, %.0f Evaluator reconciles, idle %.1f ms of CPU per second\n", n, i, q.at.Sub(churnFrom).Seconds(), reconciles-reconciles0[i], q.idle*1000)
	}
	fmt.Fprintf(os.Stderr, "%d shards: %s\n", n, row)
	// With -profiles, each replica's CPU profile once it is idle (the Lease rounds, the run
	// follower and the running EvalRuns go on; the benchmark reads nothing of it meanwhile):
	// what it pays whatever its share.
	var idle []<-chan struct{}
	for i, r := range replicas {
		idle = append(idle, profile(s.b, r.process, fmt.Sprintf("shards-%d-replica-%d-idle", n, i), idleProfileSeconds))
	}
	for _, p := range idle {
		<-p
	}
	return row, replicas
}

// idleProfileSeconds is the length of each replica's idle CPU profile (-profiles).
const idleProfileSeconds = 60

// waitSettled waits until the converged objects change no more, so that the measures start from
// the same state for every number of shards. With pods, that is once every Evaluator is Ready
// (its pool's pods ran); without, once every Deployment has passed its progress deadline (the
// Deployment controller's last change to it, 10 minutes after the operator made it). Either
// way it waits at most 10.5 minutes, the sleep it replaces: by then every Deployment, made
// before the convergence, is Ready or past that deadline.
func (s *shardBench) waitSettled(w *namespaceWatch) {
	t0 := time.Now()
	what, settled := "every Deployment past its progress deadline", func() bool { return w.pastProgressDeadline(*shardEvaluators) }
	if *pods {
		what, settled = "every Evaluator Ready", func() bool { return w.ready(*shardEvaluators) }
	}
	done := settled()
	for !done && time.Since(t0) < 10*time.Minute+30*time.Second {
		select {
		case <-s.ctx.Done():
			s.b.Fatalf("not settled: %v", s.ctx.Err())
		case <-time.After(time.Second):
		}
		done = settled()
	}
	fmt.Fprintf(os.Stderr, "waited %.0f s for the converged objects to settle (%s: %t)\n", time.Since(t0).Seconds(), what, done)
}

// quietFor is how long a replica's Evaluator queue must stay empty, and its count of Evaluator
// reconciles unchanged, before it is quiet (waitQuiet). The EvalRuns are left out: each running
// one comes back on its own every few minutes, so that with 500 of them the count never stands
// still.
const quietFor = 10 * time.Second

// quietMark is what waitQuiet read of a replica when it found it quiet.
type quietMark struct {
	at  time.Time     // when
	cpu time.Duration // its CPU time then
	// idle is its CPU per second over its quiet period (quietFor or more, no Evaluator
	// reconciled): Lease rounds, the run follower, the benchmark's scrapes.
	idle float64
}

// waitQuiet waits until each replica is quiet, so that its heap and CPU are those of the objects
// it holds, not of work still in flight, and returns what it read of each replica when it was
// first found quiet. Fixed delays (5 s after the first full reconcile, 10 s after the churn)
// caught replicas still reconciling the Deployments' status events: the one replica of one shard
// read at 92.9 to 139 MiB where it holds about 40 quiet, and the ratios to it swung between runs.
//
// The replicas are checked side by side, once a second, each against its own quiet period, and
// each one's CPU is read at the end of its own: checked one after the other and read only once
// the last was quiet, the first of three replicas was charged about 20 s more of idle work (its
// Lease rounds, the run follower, these scrapes) than one replica alone: about 0.2 s of CPU at
// the 8 to 19 ms per second a replica spends idle, against the shards in the churn CPU ratios.
func (s *shardBench) waitQuiet(replicas []*replica) []quietMark {
	// Each replica's count of reconciles when it last changed, what was read of the replica then
	// (the start of the quiet period it may be in), and, once it is quiet, what was read at the
	// period's end.
	type watch struct {
		last        float64
		from, quiet quietMark
	}
	watches := make([]watch, len(replicas))
	for i := range watches {
		watches[i].last = -1
	}
	checked := time.Time{}
	check := func() {
		if time.Since(checked) < time.Second {
			return
		}
		checked = time.Now()
		for i, r := range replicas {
			w := &watches[i]
			if !w.quiet.at.IsZero() {
				continue
			}
			n, depth, err := r.work("evaluator")
			switch {
			case err != nil || depth > 0 || n != w.last:
				w.last, w.from = n, quietMark{at: checked, cpu: r.cpu()}
			case checked.Sub(w.from.at) >= quietFor:
				cpu := r.cpu()
				w.quiet = quietMark{at: checked, cpu: cpu, idle: (cpu - w.from.cpu).Seconds() / checked.Sub(w.from.at).Seconds()}
			}
		}
	}
	marks := make([]quietMark, len(replicas))
	for i, r := range replicas {
		wait(s.b, s.ctx, r.process, "quiet (no Evaluator queued or reconciled for "+quietFor.String()+")", func() bool {
			check()
			return !watches[i].quiet.at.IsZero()
		})
		marks[i] = watches[i].quiet
	}
	return marks
}

// waitReconciled waits until each replica has reconciled every owner of the shards it holds at
// least once since before (its reconcile count then; nil: since it started).
func (s *shardBench) waitReconciled(replicas []*replica, before map[*replica]float64) {
	count := len(replicas)
	for _, r := range replicas {
		want := float64(s.owners(count, s.heldBy(r, count)...)) + before[r]
		wait(s.b, s.ctx, r.process, "every owner of its shards reconciled", func() bool {
			got, err := r.reconciles()
			return err == nil && got >= want
		})
	}
}

// heldBy returns the shards of count whose Lease r holds now.
func (s *shardBench) heldBy(r *replica, count int) []int {
	var held []int
	for i := range count {
		l, err := env.Clientset().CoordinationV1().Leases(s.ns).Get(s.ctx, operatorprocess.ShardLease(evalsi.LeaderElectionID, shard.Shard{Index: i, Count: count}), metav1.GetOptions{})
		if err == nil && holding.LeaseHolder(l, time.Now()) == r.identity {
			held = append(held, i)
		}
	}
	return held
}

// takeover reads from the survivors' logs when the last of the shards held (of count) was taken
// after t0, how many of them were taken cold (not warmed), and when the last of their engines'
// controllers had synced its cache.
func takeover(survivors []*replica, held []int, count int, t0 time.Time) (taken, synced time.Time, cold int) {
	names := map[string]bool{}
	for _, i := range held {
		names[shard.Shard{Index: i, Count: count}.String()] = true
	}
	for _, r := range survivors {
		for _, l := range r.logLines() {
			if !l.Time.After(t0) || !names[l.Shard] {
				continue
			}
			switch {
			case l.Msg == "holding a shard":
				if l.Time.After(taken) {
					taken = l.Time
				}
				if !l.Warm {
					cold++
				}
			case l.Msg == "controller synced" && l.Time.After(synced):
				synced = l.Time
			}
		}
	}
	return taken, synced, cold
}

// kill kills a replica n times, each time measuring how long the others take to reconcile every
// owner of its shards, then starts a new replica in its place and waits until the shards are
// spread again and every replica is settled.
func (s *shardBench) kill(replicas []*replica, n int) []time.Duration {
	count := len(replicas)
	var out []time.Duration
	for k := range n {
		victim := replicas[k%count]
		held := s.heldBy(victim, count)
		owners := float64(s.owners(count, held...))
		var survivors []*replica
		before := 0.0
		for _, r := range replicas {
			if r != victim {
				survivors = append(survivors, r)
				got, err := r.reconciles()
				if err != nil {
					s.b.Fatal(err)
				}
				before += got
			}
		}
		t0 := time.Now()
		victim.cmd.Process.Kill()
		<-victim.done
		victim.done <- nil
		// What the others must repair, not only look at: pools of the killed replica's shards
		// lose their Deployment right after the kill.
		var sample []string
		for key, uid := range s.uids {
			name, ok := strings.CutPrefix(key, "Evaluator/")
			if ok && len(sample) < 100 && slices.ContainsFunc(held, func(i int) bool { return (shard.Shard{Index: i, Count: count}).Contains(uid) }) {
				sample = append(sample, name+"-evaluator")
			}
		}
		client := benchClient(s.b).Resource(evalsi.Deployments).Namespace(s.ns)
		deleted := map[string]types.UID{}
		for _, name := range sample {
			d, err := client.Get(s.ctx, name, metav1.GetOptions{})
			if err != nil {
				s.b.Fatal(err)
			}
			deleted[name] = d.GetUID()
			if err := client.Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
				s.b.Fatal(err)
			}
		}
		wait(s.b, s.ctx, survivors[0].process, "the killed replica's deleted Deployments made again by the others", func() bool {
			for name, uid := range deleted {
				o, ok, _ := s.w.children[0].GetStore().GetByKey(s.ns + "/" + name)
				if !ok || o.(*unstructured.Unstructured).GetUID() == uid {
					return false
				}
			}
			return true
		})
		wait(s.b, s.ctx, survivors[0].process, "the killed replica's owners reconciled by the others", func() bool {
			total := 0.0
			for _, r := range survivors {
				got, err := r.reconciles()
				if err != nil {
					return false
				}
				total += got
			}
			return total >= before+owners
		})
		took := time.Since(t0)
		out = append(out, took)
		taken, synced, cold := takeover(survivors, held, count, t0)
		fmt.Fprintf(os.Stderr, "kill %d: shards %v (%.0f owners, %d pools' Deployments deleted) reconciled and repaired by the others %.1f s after the SIGKILL (Leases taken at %.1f s, %d of them cold; their engines synced at %.1f s)\n",
			k+1, held, owners, len(sample), took.Seconds(), taken.Sub(t0).Seconds(), cold, synced.Sub(t0).Seconds())
		replicas[k%count] = s.startReplica(victim.c)
		s.waitBalanced(replicas)
		// The next kill is of a settled set, as the first was (measure waits for it): the new
		// replica has reconciled the shard it took (warm: it joins, warms the shard its holder
		// hands over, and takes it once warmed), and every replica is quiet. Killed
		// while that start still ran, the others warmed the killed replica's shards beside it
		// on a saturated machine: 22.4 and 23.7 s in one run (a fault during the last one's
		// recovery).
		s.waitReconciled(replicas, nil)
		s.waitQuiet(replicas)
	}
	return out
}

// doubleWriters reads the audit log since the benchmark began, and nothing else of the
// replicas, and counts the writes of owners (their status) and of children by a replica that was
// not the holder of the object's shard Lease when the API server received the write: the holder
// its last successful write of that Lease named, before the write was received (the Lease's
// writes are logged with their bodies, auditPolicy). Two replicas that both believed they held a
// shard are both caught: only one of them can have written the Lease last. It returns that count
// and how many writes it checked.
func (s *shardBench) doubleWriters() (doubles, checked int, err error) {
	events, err := auditEvents(s.from, mark())
	if err != nil {
		return 0, 0, err
	}
	leases := leaseHolders(events, s.ns, evalsi.LeaderElectionID)
	for _, ev := range events {
		id, ok := identityOf(ev.UserAgent)
		if !ok || ev.ObjectRef.Namespace != s.ns {
			continue
		}
		var uid string
		switch ev.ObjectRef.Resource {
		case "evaluators":
			uid = s.uids["Evaluator/"+ev.ObjectRef.Name]
		case "evalruns":
			uid = s.uids["EvalRun/"+ev.ObjectRef.Name]
		case "leases", "events":
			continue
		default:
			uid = s.uids["Evaluator/"+strings.TrimSuffix(ev.ObjectRef.Name, "-evaluator")]
		}
		if uid == "" {
			continue // made before the sharded replicas ran
		}
		checked++
		if !leases.heldBy(id, uid, ev.Received) {
			doubles++
			if doubles <= 10 {
				fmt.Fprintf(os.Stderr, "double writer: %s wrote %s %s at %s without holding its shard's Lease\n", id, ev.ObjectRef.Resource, ev.ObjectRef.Name, ev.Received.Format(time.RFC3339Nano))
			}
		}
	}
	return doubles, checked, nil
}

// identityOf returns the replica identity in an operator's user agent
// ("evalsi-operator/VERSION (IDENTITY)").
func identityOf(userAgent string) (string, bool) {
	rest, ok := strings.CutPrefix(userAgent, "evalsi-operator/")
	if !ok {
		return "", false
	}
	_, id, ok := strings.Cut(rest, " (")
	if !ok {
		return "", false
	}
	return strings.TrimSuffix(id, ")"), true
}

// runIDsOf returns the run of each EvalRun of objs, by name.
func runIDsOf(objs []any) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		u := o.(*unstructured.Unstructured)
		out[u.GetName()], _, _ = unstructured.NestedString(u.Object, "status", "runId")
	}
	return out
}

// String is one number of shards' figures, for the progress lines.
func (r shardRow) String() string {
	return fmt.Sprintf("every owner reconciled %.1f s after the replicas started; live heap per replica %s; churn CPU per replica %s (above idle: %s)",
		r.start.Seconds(), mib(r.heap), seconds(r.churnCPU), seconds(r.churnOverIdle))
}

func mib(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.1f MiB", x/(1<<20)))
	}
	return strings.Join(parts, ", ")
}

func seconds(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%.2f s", d.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// shardTable compares each number of shards with one: the largest replica's live heap, churn CPU
// and churn CPU above idle, and the kills.
func shardTable(rows []shardRow, owners, runs int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d owners (%d Evaluators with their children, %d running EvalRuns); as many replicas as shards\n\n", owners, owners-runs, runs)
	fmt.Fprintf(&sb, "| shards | every owner reconciled after start | live heap (allocated right after a collection), largest replica | x one | churn CPU, largest replica | x one | above idle, largest replica | x one | SIGKILL to the killed replica's owners reconciled |\n")
	fmt.Fprintf(&sb, "|---|---|---|---|---|---|---|---|---|\n")
	var heap1, cpu1, net1 float64
	for _, r := range rows {
		heap, cpu, net := slices.Max(r.heap), slices.Max(r.churnCPU).Seconds(), slices.Max(r.churnOverIdle).Seconds()
		if r.shards == 1 {
			heap1, cpu1, net1 = heap, cpu, net
		}
		ratio := func(x, one float64) string {
			if one == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", x/one)
		}
		kills := "-"
		if len(r.kills) > 0 {
			sorted := slices.Sorted(slices.Values(r.kills))
			kills = fmt.Sprintf("median %.1f s, max %.1f s (%d kills)", sorted[len(sorted)/2].Seconds(), sorted[len(sorted)-1].Seconds(), len(sorted))
		}
		fmt.Fprintf(&sb, "| %d | %.1f s | %.1f MiB (%.1f KiB per Evaluator of the whole) | %s | %.2f s | %s | %.2f s | %s | %s |\n",
			r.shards, r.start.Seconds(), heap/(1<<20), heap/1024/float64(max(owners-runs, 1)), ratio(heap, heap1), cpu, ratio(cpu, cpu1), net, ratio(net, net1), kills)
	}
	return sb.String()
}
