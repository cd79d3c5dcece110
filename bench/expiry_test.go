package bench

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
)

var (
	finishedRuns = flag.Int("finished", 20000, "finished EvalRuns of BenchmarkFinishedEvalRunsExpire")
	finishedTTL  = flag.Duration("finished-ttl", 8*time.Minute, "their TTL (--evalrun-ttl): long enough to create them all and measure the operator with them before the first goes")
	followedRuns = flag.Int("followed", 500, "running EvalRuns beside the finished ones, whose following is measured with and without them")
	window       = flag.Duration("window", time.Minute, "how long the operator's CPU and calls are measured with and without the finished EvalRuns")
)

// BenchmarkFinishedEvalRunsExpire measures finished EvalRuns expiring, at the operator's
// defaults but --evalrun-ttl: with -followed running EvalRuns followed on the reference evalsid,
// the operator's CPU and its evalsid calls by method over -window, then the same with -finished
// EvalRuns whose runs ended (written by the benchmark while the operator is stopped, as an
// operator leaves them), and finally how long after its TTL each finished EvalRun is deleted.
func BenchmarkFinishedEvalRunsExpire(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	setup(b, ctx)
	op := *operatorBin
	if op == "" {
		op = clustertest.Operator(b)
	}
	for range b.N {
		ns := fmt.Sprintf("bench-expiry-%d", time.Now().UnixNano())
		createNamespace(b, ctx, ns)
		api, apiAddr, _, apiToken := startEvalsid(b, ctx, op)
		defer api.stop()
		operator := func(ttl time.Duration) *process {
			return start(b, ctx, runsOperator(op, apiAddr, apiToken, "--evalrun-ttl="+ttl.String()), ns)
		}

		// Deletions as the benchmark's own informer sees them.
		var mu sync.Mutex
		deleted := map[string]time.Time{}
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(env.Dynamic(), 0, ns, nil)
		runs := f.ForResource(evalsi.EvalRuns).Informer()
		runs.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				mu.Lock()
				deleted[u.GetName()] = time.Now()
				mu.Unlock()
			}
		}})
		f.Start(ctx.Done())
		f.WaitForCacheSync(ctx.Done())
		client := benchClient(b).Resource(evalsi.EvalRuns).Namespace(ns)

		// The followed runs alone.
		p := operator(*finishedTTL)
		createRunning(b, ctx, p, client, runs.GetStore(), *followedRuns, "running")
		// Both measurements are of an operator restarted over what it follows, once it has
		// settled: the same start, the same age.
		p.stop()
		p = operator(*finishedTTL)
		time.Sleep(settleTime)
		alone := measureFollowing(b, p, *window)
		p.stop()

		// The finished runs, written while no operator runs: created, then given the status of a
		// run that ended (its id is not on evalsid: a call for it would fail and show).
		var completedMu sync.Mutex
		completed := map[string]time.Time{}
		t0 := time.Now()
		if err := parallel(*finishedRuns, creators, func(i int) error {
			name := fmt.Sprintf("finished-%05d", i)
			obj, err := client.Create(ctx, evalRun(name), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			ended := time.Now().UTC().Truncate(time.Second)
			obj.Object["status"] = map[string]any{"runId": "ended-" + name, "phase": evalsi.PhaseSucceeded,
				"startedAt": ended.Add(-time.Minute).Format(time.RFC3339), "completedAt": ended.Format(time.RFC3339)}
			if _, err := client.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
				return err
			}
			completedMu.Lock()
			completed[name] = ended
			completedMu.Unlock()
			return nil
		}); err != nil {
			b.Fatalf("creating finished EvalRuns: %v", err)
		}
		created := time.Since(t0)

		// The operator again, with them: once each shows when it expires and it settled, the same
		// window.
		p = operator(*finishedTTL)
		defer p.stop()
		started, writes0 := time.Now(), mark()
		wait(b, ctx, p, "every finished EvalRun showing when it expires", func() bool {
			n := 0
			for _, o := range runs.GetStore().List() {
				if _, ok, _ := unstructured.NestedString(o.(*unstructured.Unstructured).Object, "status", "expiresAt"); ok {
					n++
				}
			}
			return n == *finishedRuns
		})
		settle := time.Since(started)
		time.Sleep(settleTime)
		settleWrites, err := writes(writes0, mark())
		if err != nil {
			b.Fatal(err)
		}
		with := measureFollowing(b, p, *window)
		if early := firstDeleted(deleted, &mu, completed); !early.IsZero() {
			b.Logf("the first finished EvalRun went %s before the measurement with them ended: raise -finished-ttl", time.Since(early).Round(time.Second))
		}

		// Every finished EvalRun deleted; how long after its TTL.
		calls0 := with.after
		wait(b, ctx, p, "every finished EvalRun deleted", func() bool {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for name := range completed {
				if _, ok := deleted[name]; ok {
					n++
				}
			}
			return n == len(completed)
		})
		callsAfter, err := callsByMethod(p)
		if err != nil {
			b.Fatal(err)
		}
		var lags []time.Duration
		mu.Lock()
		for name, ended := range completed {
			lags = append(lags, deleted[name].Sub(ended.Add(*finishedTTL)))
		}
		mu.Unlock()
		slices.Sort(lags)
		q := func(p float64) time.Duration { return lags[int(p*float64(len(lags)-1))].Round(100 * time.Millisecond) }
		cpuRatio := with.cpuPerSecond / alone.cpuPerSecond
		b.ReportMetric(cpuRatio, "cpu-with/without")
		b.ReportMetric(q(1).Seconds(), "s-latest-after-ttl")
		fmt.Printf("%d finished EvalRuns (created and ended in %s) beside %d running ones, TTL %s\n"+
			"  operator CPU over %s: %.1f ms/s without them, %.1f ms/s with them (x%.2f)\n"+
			"  evalsid calls per second: %s without them, %s with them; while they expired: %s\n"+
			"  settling after the restart with them: %s, Kubernetes writes %d (%s)\n"+
			"  deleted after their TTL: p50 %s, p99 %s, latest %s (the run's end is recorded to the second)\n",
			len(completed), created.Round(time.Second), *followedRuns, *finishedTTL,
			*window, alone.cpuPerSecond, with.cpuPerSecond, cpuRatio,
			alone.rates(), with.rates(), callDiff(calls0, callsAfter),
			settle.Round(time.Second), settleWrites.total(), settleWrites, q(0.5), q(0.99), q(1))
	}
}

// settleTime is how long the operator runs after a restart (and after the status writes that it
// makes) before it is measured: past the first poll and the reconciles of the restart.
const settleTime = 30 * time.Second

// following is the operator's CPU and evalsid calls over a window.
type following struct {
	cpuPerSecond  float64
	callsPerSec   map[string]float64
	before, after map[string]float64
}

// rates prints the calls per second by method.
func (f following) rates() string {
	var out []string
	for _, m := range slices.Sorted(maps.Keys(f.callsPerSec)) {
		out = append(out, fmt.Sprintf("%s %.2f", m, f.callsPerSec[m]))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// measureFollowing measures p's CPU and evalsid calls by method over window.
func measureFollowing(b *testing.B, p *process, window time.Duration) following {
	before, err := callsByMethod(p)
	if err != nil {
		b.Fatal(err)
	}
	cpu0, t0 := p.cpu(), time.Now()
	time.Sleep(window)
	cpu, elapsed := p.cpu()-cpu0, time.Since(t0).Seconds()
	after, err := callsByMethod(p)
	if err != nil {
		b.Fatal(err)
	}
	f := following{cpuPerSecond: cpu.Seconds() / elapsed * 1000, callsPerSec: map[string]float64{}, before: before, after: after}
	for m, n := range after {
		if d := n - before[m]; d > 0 {
			f.callsPerSec[m] = d / elapsed
		}
	}
	return f
}

// callsByMethod reads the operator's evalsid calls by method (evalsi_evalsid_calls_total).
func callsByMethod(p *process) (map[string]float64, error) {
	families, err := p.scrape()
	if err != nil {
		return nil, err
	}
	calls := map[string]float64{}
	if f := families["evalsi_evalsid_calls_total"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" {
					calls[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return calls, nil
}

// callDiff prints the calls by method between two readings.
func callDiff(before, after map[string]float64) string {
	var out []string
	for _, m := range slices.Sorted(maps.Keys(after)) {
		if d := after[m] - before[m]; d > 0 {
			out = append(out, fmt.Sprintf("%s %.0f", m, d))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// firstDeleted returns when the first of the finished EvalRuns was deleted, or zero.
func firstDeleted(deleted map[string]time.Time, mu *sync.Mutex, finished map[string]time.Time) time.Time {
	mu.Lock()
	defer mu.Unlock()
	var first time.Time
	for name := range finished {
		if at, ok := deleted[name]; ok && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}
