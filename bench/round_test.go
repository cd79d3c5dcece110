package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"evals.si/operator/evalsi"
)

// roundResult is what one round of one contender measured.
type roundResult struct {
	converge, ready time.Duration // from the first create until converged, until every pool is Ready
	created         time.Duration // from the first create until the last returned
	cpuConverge     time.Duration // the contender's CPU time until converged
	peakRSS         float64       // bytes
	liveHeap        heapMeasure   // at steady state, right after a garbage collection
	reconciles      float64       // reconciles of Evaluators until Ready
	// writes by resource until converged, until Ready (from the start) and in the idle window
	writesConverge, writesReady, writesIdle writeCount
	// restart: from the new process's start until it had reconciled every Evaluator once, and
	// the writes from its start until a few seconds after that
	restart       time.Duration
	writesRestart writeCount
	// eventLag is the longest time from an Evaluator's Ready status to the Event that reports it
	// being written (whole seconds, as both are stamped); lateEvents how many took over 5 s, and
	// noEvents how many Evaluators had none by the end of the idle window.
	eventLag             time.Duration
	lateEvents, noEvents int
}

func (r roundResult) String() string {
	return fmt.Sprintf("created %.2fs, converged %.2fs (CPU %.2fs, writes %d: %s), Ready %.2fs (writes %d, reconciles %.0f), idle writes %d, peak RSS %.0f MiB, live heap %s, restart %.2fs (writes %d), Ready Events: latest %.0fs after the status, %d over 5s, %d missing",
		r.created.Seconds(), r.converge.Seconds(), r.cpuConverge.Seconds(), r.writesConverge.total(), r.writesConverge, r.ready.Seconds(),
		r.writesReady.total(), r.reconciles, r.writesIdle.total(), r.peakRSS/(1<<20), r.liveHeap,
		r.restart.Seconds(), r.writesRestart.total(), r.eventLag.Seconds(), r.lateEvents, r.noEvents)
}

// runRound runs contender c against n new Evaluators in a new namespace: create them all at once,
// wait until converged and until Ready, watch them idle, read its memory, restart it. It returns
// the measures and the namespace, left in place for the comparison of outputs.
func runRound(b *testing.B, ctx context.Context, c contender, n, round int) (roundResult, string) {
	ns := fmt.Sprintf("bench-%d-%d-%s", n, round, c.short)
	createNamespace(b, ctx, ns)
	// A round that fails leaves its objects to no one: the benchmarks after it would share the
	// control plane with them (its namespace goes with the others' otherwise).
	b.Cleanup(func() {
		if b.Failed() {
			deleteNamespace(b, context.Background(), ns, 10*time.Minute)
		}
	})
	p := start(b, ctx, c, ns)
	defer func() { p.stop() }()
	w := watchNamespace(b, ctx, ns)
	time.Sleep(time.Second) // let the contender list its (empty) caches

	var res roundResult
	profiled := profile(b, p, fmt.Sprintf("%s-%d-%d", c.short, n, round), *profileSeconds)
	defer func() { <-profiled }()
	from, cpu0, t0 := mark(), p.cpu(), time.Now()
	client := benchClient(b).Resource(evalsi.Evaluators).Namespace(ns)
	if err := parallel(n, creators, func(i int) error {
		_, err := client.Create(ctx, evaluator(ns, i), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating Evaluators: %v", err)
	}
	res.created = time.Since(t0)
	wait(b, ctx, p, "converged", func() bool { return w.converged(n) })
	res.converge, res.cpuConverge = time.Since(t0), p.cpu()-cpu0
	// Printed at once: at 10,000 the rest of the round takes another quarter of an hour.
	fmt.Fprintf(os.Stderr, "%d Evaluators, round %d, %s: converged %.2fs (CPU %.2fs)\n", n, round+1, c.name, res.converge.Seconds(), res.cpuConverge.Seconds())
	converged := mark()
	ready := converged
	if *pods {
		wait(b, ctx, p, "Ready", func() bool { return w.ready(n) })
		res.ready = time.Since(t0)
		ready = mark()
	}
	// A Ready pool's Deployment still gets status writes by the controller-manager for a moment,
	// and each is an event for the contender: the idle window starts once they are done.
	time.Sleep(5 * time.Second)
	var err error
	if res.reconciles, err = p.reconciles(); err != nil {
		b.Fatal(err)
	}
	if !*pods {
		// A Deployment without pods changes once more at its progress deadline (10 minutes
		// after the contender made it, at the latest before it converged), which the idle
		// window must not see.
		time.Sleep(time.Until(t0.Add(res.converge + 10*time.Minute + 30*time.Second)))
		// The controller-manager works through those changes (one per Deployment) for minutes at
		// 10,000; unwaited, they ran on into the next contender's round and slowed it.
		wait(b, ctx, p, "every Deployment past its progress deadline", func() bool { return w.pastProgressDeadline(n) })
	}
	idleFrom := mark()
	time.Sleep(*idle)
	idleTo := mark()
	if res.liveHeap, err = p.liveHeap(fmt.Sprintf("%s-%d-%d", c.short, n, round)); err != nil {
		b.Fatal(err)
	}
	res.peakRSS = p.peakRSS()
	for _, span := range []struct {
		to  auditMark
		out *writeCount
	}{{converged, &res.writesConverge}, {ready, &res.writesReady}} {
		if *span.out, err = writes(from, span.to); err != nil {
			b.Fatal(err)
		}
	}
	if res.writesIdle, err = writes(idleFrom, idleTo); err != nil {
		b.Fatal(err)
	}
	if *pods {
		if res.eventLag, res.lateEvents, res.noEvents, err = readyEventLags(ctx, ns); err != nil {
			b.Fatal(err)
		}
	}

	// Restart: a new process over converged objects.
	p.stop()
	restartFrom, t1 := mark(), time.Now()
	p = start(b, ctx, c, ns)
	wait(b, ctx, p, "every Evaluator reconciled after the restart", func() bool {
		r, err := p.reconciles()
		return err == nil && r >= float64(n)
	})
	res.restart = time.Since(t1)
	time.Sleep(5 * time.Second)
	if res.writesRestart, err = writes(restartFrom, mark()); err != nil {
		b.Fatal(err)
	}
	return res, ns
}

// readyEventLags compares each Evaluator's Ready condition with the Event that reports it (same
// reason): the longest time from the condition's transition to the Event's creation by the API
// server, how many took over 5 s, and how many Evaluators have no such Event.
func readyEventLags(ctx context.Context, ns string) (longest time.Duration, late, missing int, err error) {
	evs, err := env.Dynamic().Resource(evalsi.Evaluators).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, 0, err
	}
	events, err := env.Clientset().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Evaluator"})
	if err != nil {
		return 0, 0, 0, err
	}
	written := map[string]time.Time{}
	for _, e := range events.Items {
		k := e.InvolvedObject.Name + "/" + e.Reason
		if t, ok := written[k]; !ok || e.CreationTimestamp.Time.Before(t) {
			written[k] = e.CreationTimestamp.Time
		}
	}
	for _, ev := range evs.Items {
		m := condition(&ev, evalsi.ConditionReady)
		if m == nil {
			continue
		}
		reason, _ := m["reason"].(string)
		since, _ := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
		at, ok := written[ev.GetName()+"/"+reason]
		if !ok {
			missing++
			continue
		}
		lag := at.Sub(since)
		longest = max(longest, lag)
		if lag > 5*time.Second {
			late++
		}
	}
	return longest, late, missing, nil
}

// wait polls done every 50 ms until it holds; the round fails after -wait or when the contender
// exits.
func wait(b *testing.B, ctx context.Context, p *process, what string, done func() bool) {
	deadline := time.Now().Add(*limit)
	for !done() {
		select {
		case err := <-p.done:
			p.done <- err
			b.Fatalf("%s exited before %s: %v\n%s", p.c.name, what, err, p.logs())
		case <-ctx.Done():
			b.Fatalf("%s: not %s: %v", p.c.name, what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not %s after %v\n%s", p.c.name, what, *limit, p.logs())
		}
	}
}

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

func createNamespace(b testing.TB, ctx context.Context, name string) {
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
	if _, err := env.Dynamic().Resource(namespaces).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
}

// deleteNamespace deletes a round's namespace and waits until it is gone (at most within), so
// that the next round does not share the machine with its garbage collection.
func deleteNamespace(b testing.TB, ctx context.Context, name string, within time.Duration) {
	c := env.Dynamic().Resource(namespaces)
	if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		b.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for {
		_, err := c.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.Fatalf("namespace %s not gone after %v: %v", name, within, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// parallel runs f for 0..n-1 on workers goroutines and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
