package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
)

var (
	runningRuns = flag.Int("runs", 2000, "running EvalRuns of BenchmarkRunningEvalRuns")
	runsWindow  = flag.Duration("runs-window", time.Minute, "how long BenchmarkRunningEvalRuns measures the running EvalRuns")
	operatorBin = flag.String("operator", "", "an evalsi-operator binary to run instead of this tree's (another build, to compare)")
)

// BenchmarkRunningEvalRuns measures what following running EvalRuns costs: with -runs EvalRuns
// whose runs stay Running on the reference evalsid, the operator's CPU per second and the calls
// per second evalsid receives, over -runs-window, at the operator's defaults (a 10 s poll).
func BenchmarkRunningEvalRuns(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	setup(b, ctx)
	op := *operatorBin
	if op == "" {
		op = clustertest.Operator(b)
	}
	for range b.N {
		ns := fmt.Sprintf("bench-runs-%d", time.Now().UnixNano())
		createNamespace(b, ctx, ns)
		api, apiAddr, _, apiToken := startEvalsid(b, ctx, op)
		defer api.stop()
		p := start(b, ctx, runsOperator(op, apiAddr, apiToken), ns)
		defer p.stop()

		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(env.Dynamic(), 0, ns, nil)
		runs := f.ForResource(evalsi.EvalRuns).Informer()
		f.Start(ctx.Done())
		f.WaitForCacheSync(ctx.Done())
		client := benchClient(b).Resource(evalsi.EvalRuns).Namespace(ns)
		createRunning(b, ctx, p, client, runs.GetStore(), *runningRuns, "run")
		time.Sleep(15 * time.Second) // past the first poll of every run
		calls := func() float64 {
			families, err := p.scrape()
			if err != nil {
				b.Fatal(err)
			}
			var n float64
			if f := families["evalsi_evalsid_calls_total"]; f != nil {
				for _, m := range f.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
			return n
		}
		cpu0, calls0, writes0, t0 := p.cpu(), calls(), mark(), time.Now()
		time.Sleep(*runsWindow)
		cpu, n, elapsed := p.cpu()-cpu0, calls()-calls0, time.Since(t0).Seconds()
		w, err := writes(writes0, mark())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(cpu.Seconds()/elapsed*1000, "cpu-ms/s")
		b.ReportMetric(n/elapsed, "evalsid-calls/s")
		fmt.Printf("%d running EvalRuns over %.0fs: operator CPU %.1f ms/s (%.3f ms per run per second), evalsid calls %.2f/s (%.4f per run per second), Kubernetes writes %d (%s)\n",
			*runningRuns, elapsed, cpu.Seconds()/elapsed*1000, cpu.Seconds()/elapsed*1000/float64(*runningRuns),
			n/elapsed, n/elapsed/float64(*runningRuns), w.total(), w)
	}
}

// runsOperator is the operator binary op running the EvalRun controller only, against the
// evalsid at apiAddr, at its defaults but for extra flags.
func runsOperator(op, apiAddr, apiToken string, extra ...string) contender {
	return contender{name: "evalsi-operator", reconciles: "evalsi_reconcile_total", args: func(kubeconfig, ns, metrics, pprof string) []string {
		return append([]string{op, "run", "--kubeconfig=" + kubeconfig, "--namespace=" + ns, "--controllers=evalrun",
			"--leader-elect=false", "--log-level=warn", "--metrics-bind-address=" + metrics, "--pprof-bind-address=" + pprof,
			"--health-probe-bind-address=0", "--api-url=http://" + apiAddr, "--api-token-file=" + apiToken}, extra...)
	}}
}

// evalRun is a benchmark's EvalRun named name.
func evalRun(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"suite": "smoke", "trials": int64(1),
			"target": map[string]any{"endpoint": map[string]any{"url": "http://model:8000/v1", "model": "m"}}},
	}}
}

// createRunning creates n EvalRuns named prefix-NNNN and waits until store (an informer's of
// their namespace) shows n runs Running, which the operator p follows.
func createRunning(b *testing.B, ctx context.Context, p *process, client dynamic.ResourceInterface, store cache.Store, n int, prefix string) {
	if err := parallel(n, creators, func(i int) error {
		_, err := client.Create(ctx, evalRun(fmt.Sprintf("%s-%04d", prefix, i)), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating EvalRuns: %v", err)
	}
	wait(b, ctx, p, "every run Running", func() bool {
		running := 0
		for _, o := range store.List() {
			if phase, _, _ := unstructured.NestedString(o.(*unstructured.Unstructured).Object, "status", "phase"); phase == evalsi.PhaseRunning {
				running++
			}
		}
		return running == n
	})
}

// startEvalsid runs the reference evalsid of binary op on a free loopback address, with runs that
// become Running after a second and stay so. It returns the process, its address, the address of
// its metrics and the file of the token it accepts.
func startEvalsid(b *testing.B, ctx context.Context, op string) (p *process, addr, metricsAddr, tokenFile string) {
	addrs, err := freeAddrs(2)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	tokens, tokenFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "token")
	if err := os.WriteFile(tokens, []byte("bench-token system:serviceaccount:evalsi:evalsi-operator\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("bench-token\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	p = launch(b, contender{name: "evalsid"}, []string{op, "evalsid", "--listen=" + addrs[0], "--metrics-bind-address=" + addrs[1], "--tokens=" + tokens,
		"--pending=1s", "--running=0", "--platform-identity=system:serviceaccount:evalsi:evalsi-operator"})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addrs[0] + "/healthz")
		if err == nil {
			resp.Body.Close()
			return p, addrs[0], addrs[1], tokenFile
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			b.Fatalf("evalsid did not answer: %v\n%s", err, p.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runsAtEvalsid counts the runs the reference evalsid holds for project, read from its metrics
// at metricsAddr (evalsid_runs; its run ids cannot be guessed, so they cannot be asked for).
func runsAtEvalsid(ctx context.Context, metricsAddr, project string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading evalsid's metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("reading evalsid's metrics: %w", err)
	}
	prefix := fmt.Sprintf("evalsid_runs{project=%q} ", project)
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, nil
}
