package reconcile

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// Settings of the convergence benchmark; the operator runs with its default rate limits and
// workers, and the floor uses the same.
const (
	benchEvaluators = 500
	benchQPS        = 1000
	benchBurst      = 2000
	benchWorkers    = 16
)

// BenchmarkConverge500Evaluators creates 500 autoscaled Evaluators at once and measures the time
// until all their children exist and every status is current (observedGeneration). It compares
// that with a plain client using the same rate limits and concurrency: the floor is the time it
// takes to create the same children (target ratio: at most 1.3); the work floor adds what the
// result cannot do without, creating the Evaluators and writing each status once. It also reports
// the operator process's peak memory.
func BenchmarkConverge500Evaluators(b *testing.B) {
	needCluster(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := env.InstallKedaCRDs(ctx); err != nil {
		b.Fatal(err)
	}
	bin := clustertest.Operator(b)
	for range b.N {
		floor := benchFloor(b, ctx)
		work := floor.evaluators + floor.children + floor.statuses
		converge, peak := benchOperator(b, ctx, bin)
		b.ReportMetric(converge.Seconds(), "converge-s")
		b.ReportMetric(floor.children.Seconds(), "floor-s")
		b.ReportMetric(converge.Seconds()/floor.children.Seconds(), "ratio")
		b.ReportMetric(converge.Seconds()/work.Seconds(), "work-ratio")
		b.ReportMetric(peak, "peak-MiB")
		fmt.Printf("%d Evaluators: converged in %.2fs; a plain client creates their children in %.2fs (ratio %.2f); "+
			"with creating the Evaluators (%.2fs) and writing one status each (%.2fs, +%.0f%% on the children) it takes %.2fs (ratio %.2f); "+
			"operator peak RSS %.0f MiB\n",
			benchEvaluators, converge.Seconds(), floor.children.Seconds(), converge.Seconds()/floor.children.Seconds(),
			floor.evaluators.Seconds(), floor.statuses.Seconds(), 100*floor.statuses.Seconds()/floor.children.Seconds(),
			work.Seconds(), converge.Seconds()/work.Seconds(), peak)
	}
}

// benchEvaluator is the i-th Evaluator of the benchmark.
func benchEvaluator(ns string, i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": fmt.Sprintf("pool-%03d", i), "namespace": ns},
		"spec": map[string]any{
			"autoscaling": map[string]any{"minReplicas": int64(0), "maxReplicas": int64(10), "targetQueueDepth": int64(5)},
		},
	}}
}

func benchClient(b *testing.B) *dynamic.DynamicClient {
	rc := rest.CopyConfig(env.Config)
	rc.QPS, rc.Burst = benchQPS, benchBurst
	c, err := dynamic.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	return c
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

// floorTimes are the phases of a plain client's work for the benchmark's Evaluators.
type floorTimes struct{ evaluators, children, statuses time.Duration }

// benchFloor does with a plain client, one phase after the other, the least API work the
// operator's result needs: create the Evaluators, create their children, write each status once.
func benchFloor(b *testing.B, ctx context.Context) floorTimes {
	ns := newNamespace(b, ctx, fmt.Sprintf("bench-floor-%d", time.Now().UnixNano()))
	opts := testOptions
	opts.Autoscaling = true
	c := benchClient(b)
	status := map[string]any{"observedGeneration": int64(1), "autoscaling": "KEDA", "replicas": int64(0), "readyReplicas": int64(0),
		"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "RollingOut", "observedGeneration": int64(1),
			"message": "waiting for the Deployment to be observed", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}}
	evs := make([]*unstructured.Unstructured, benchEvaluators)
	children := make([][]*unstructured.Unstructured, benchEvaluators)
	phase := func(f func(i int) error) time.Duration {
		start := time.Now()
		if err := parallel(benchEvaluators, benchWorkers, f); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var t floorTimes
	t.evaluators = phase(func(i int) error {
		ev, err := c.Resource(evalsi.Evaluators).Namespace(ns).Create(ctx, benchEvaluator(ns, i), metav1.CreateOptions{FieldManager: FieldManager})
		evs[i] = ev
		return err
	})
	for i, ev := range evs {
		r, err := render.Object(ev, opts)
		if err != nil {
			b.Fatal(err)
		}
		children[i] = r.Objects
	}
	t.children = phase(func(i int) error {
		for _, o := range children[i] {
			if _, err := c.Resource(evalsi.ChildResources[o.GetKind()]).Namespace(ns).Create(ctx, o, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
				return err
			}
		}
		return nil
	})
	t.statuses = phase(func(i int) error {
		evs[i].Object["status"] = status
		_, err := c.Resource(evalsi.Evaluators).Namespace(ns).UpdateStatus(ctx, evs[i], metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	// Let the controller-manager and KWOK finish with these Deployments before the next run, so
	// that it does not pay for this one's work.
	for ctx.Err() == nil {
		l, err := c.Resource(evalsi.Deployments).Namespace(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		done := err == nil
		for _, d := range l.Items {
			if r, _, _ := unstructured.NestedInt64(d.Object, "status", "availableReplicas"); r < 1 {
				done = false
				break
			}
		}
		if done {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return t
}

// benchOperator runs the operator as a process, creates the Evaluators and waits until every
// child exists and every status is current. It returns that time and the process's peak RSS.
func benchOperator(b *testing.B, ctx context.Context, bin string) (time.Duration, float64) {
	ns := newNamespace(b, ctx, fmt.Sprintf("bench-op-%d", time.Now().UnixNano()))
	cmd := exec.CommandContext(ctx, bin, "run", "--kubeconfig="+env.Kubeconfig, "--namespace="+ns,
		"--controllers=evaluator", "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--log-level=warn",
		"--default-image="+testOptions.DefaultImage, fmt.Sprintf("--kube-api-qps=%d", benchQPS), fmt.Sprintf("--kube-api-burst=%d", benchBurst), "--api-url="+testOptions.APIURL)
	logs, err := os.Create(filepath.Join(b.TempDir(), "operator.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	time.Sleep(time.Second) // let the operator start its informers

	c := benchClient(b)
	watch := watchConvergence(ctx, c, ns)
	start := time.Now()
	err = parallel(benchEvaluators, benchWorkers, func(i int) error {
		_, err := c.Resource(evalsi.Evaluators).Namespace(ns).Create(ctx, benchEvaluator(ns, i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	for {
		if watch.converged() {
			break
		}
		if ctx.Err() != nil {
			out, _ := os.ReadFile(logs.Name())
			b.Fatalf("not converged: %v\n%s", ctx.Err(), out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	return elapsed, peakRSS(b, cmd.Process.Pid)
}

// convergenceWatch follows a namespace's Evaluators and their children with informers, so that
// measuring convergence costs the API server a watch rather than repeated lists.
type convergenceWatch struct {
	evaluators, deployments, scaledObjects cache.SharedIndexInformer
}

func watchConvergence(ctx context.Context, c dynamic.Interface, ns string) *convergenceWatch {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c, 0, ns, nil)
	w := &convergenceWatch{
		evaluators:    f.ForResource(evalsi.Evaluators).Informer(),
		deployments:   f.ForResource(evalsi.Deployments).Informer(),
		scaledObjects: f.ForResource(evalsi.ScaledObjects).Informer(),
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return w
}

// converged reports whether every child exists and every Evaluator's status is current.
func (w *convergenceWatch) converged() bool {
	if len(w.deployments.GetStore().ListKeys()) != benchEvaluators || len(w.scaledObjects.GetStore().ListKeys()) != benchEvaluators {
		return false
	}
	evs := w.evaluators.GetStore().List()
	if len(evs) != benchEvaluators {
		return false
	}
	for _, o := range evs {
		ev := o.(*unstructured.Unstructured)
		g, found, _ := unstructured.NestedInt64(ev.Object, "status", "observedGeneration")
		if !found || g != ev.GetGeneration() {
			return false
		}
	}
	return true
}

// peakRSS reads a process's peak resident set (VmHWM) in MiB.
func peakRSS(b *testing.B, pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM")
	return 0
}
