package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"evals.si/operator/cluster/clustertest"
)

// contender is a program that does the Evaluator controller's job: the operator or the peer.
type contender struct {
	name string
	// short names its rounds' namespaces and profiles.
	short string
	// args are the program and its arguments with kubeconfig, for namespace ns, with its
	// metrics and profiles on the given loopback addresses.
	args func(kubeconfig, ns, metrics, pprof string) []string
	// reconciles is the metric that counts its reconciles of Evaluators.
	reconciles string
	// launcher starts its command (nil: exec.Cmd.Start); BenchmarkShards gives one that starts
	// each replica on the replicas' CPUs (-pin).
	launcher func(*exec.Cmd) error
}

// contenders returns the operator and the peer, each run as a user runs it: the defaults of
// its flags, the same rendering settings, the benchmark's service account.
func contenders(b *testing.B) []contender {
	op := *operatorBin
	if op == "" {
		op = clustertest.Operator(b)
	}
	peer := clustertest.Binary(b, "peer", "evals.si/operator/bench/peer")
	return []contender{{
		name: "evalsi-operator", short: "operator",
		args: func(kubeconfig, ns, metrics, pprof string) []string {
			return []string{op, "run", "--kubeconfig=" + kubeconfig, "--namespace=" + ns,
				"--controllers=evaluator", "--leader-elect=false", "--log-level=warn",
				"--metrics-bind-address=" + metrics, "--pprof-bind-address=" + pprof, "--health-probe-bind-address=0",
				"--default-image=" + image, "--api-url=" + apiURL}
		},
		reconciles: "evalsi_reconcile_total",
	}, {
		name: "controller-runtime peer", short: "peer",
		args: func(kubeconfig, ns, metrics, pprof string) []string {
			return []string{peer, "--kubeconfig=" + kubeconfig, "--namespace=" + ns,
				"--metrics-bind-address=" + metrics, "--pprof-bind-address=" + pprof,
				"--default-image=" + image, "--api-url=" + apiURL}
		},
		reconciles: "controller_runtime_reconcile_total",
	}}
}

// process is a running contender.
type process struct {
	c              contender
	cmd            *exec.Cmd
	metrics, pprof string
	log            string
	done           chan error
	stopped        sync.Once
}

// start runs c for namespace ns as the benchmark's service account and waits until its metrics
// answer.
func start(b testing.TB, ctx context.Context, c contender, ns string) *process {
	addrs, err := freeAddrs(2)
	if err != nil {
		b.Fatal(err)
	}
	_, kubeconfig := clustertest.TokenKubeconfig(b, ctx, env, controllerNamespace, controllerAccount)
	p := launch(b, c, c.args(kubeconfig, ns, addrs[0], addrs[1]))
	p.metrics, p.pprof = addrs[0], addrs[1]
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := p.scrape(); err == nil {
			return p
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			b.Fatalf("%s did not serve its metrics: %s", c.name, p.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// launch starts args as c, its output in a log file.
func launch(b testing.TB, c contender, args []string) *process {
	p := &process{c: c, log: filepath.Join(b.TempDir(), "log"), done: make(chan error, 1)}
	logs, err := os.Create(p.log)
	if err != nil {
		b.Fatal(err)
	}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	launcher := c.launcher
	if launcher == nil {
		launcher = (*exec.Cmd).Start
	}
	if err := launcher(p.cmd); err != nil {
		b.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait(); logs.Close() }()
	return p
}

// stop ends the process with SIGTERM (SIGKILL after 30 s) and waits for it.
func (p *process) stop() {
	p.stopped.Do(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// logs returns the end of the process's log.
func (p *process) logs() string {
	out, _ := os.ReadFile(p.log)
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}

// cpu returns the CPU time (user and system) the process has used, from /proc.
func (p *process) cpu() time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which ends with the last ")": utime and stime are
	// the 14th and 15th fields of the line, in clock ticks (100 per second on Linux).
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// peakRSS returns the process's peak resident set (VmHWM) in bytes.
func (p *process) peakRSS() float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

// heapRecordRE finds the in-use objects and bytes of each record of a heap profile's text form,
// heapRateRE its sampling rate (the header gives twice the rate), and heapAllocRE the runtime's
// count of allocated heap bytes it ends with.
var (
	heapRecordRE = regexp.MustCompile(`(?m)^(\d+): (\d+) \[\d+: \d+\] @`)
	heapRateRE   = regexp.MustCompile(`(?m)^heap profile: .* @ heap/(\d+)$`)
	heapAllocRE  = regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)$`)
)

// heapMeasure is a process's heap right after a garbage collection it asked for, as its heap
// profile's text form gives it.
type heapMeasure struct {
	// inUse is what the profile's records count in use, each record's sampled bytes scaled up as
	// pprof scales them (runtime.MemProfileRate samples one allocation per rate bytes on
	// average), and inUseSE the standard error of that estimate: with the default rate of
	// 512 KiB, about 10% of a heap of small objects (4.8 MiB of 46.7 at 10,000 Evaluators).
	inUse, inUseSE float64
	// allocated is the runtime's count of allocated heap bytes, read after the records were
	// written: the live heap, exactly, plus what the process allocated since the collection
	// (the profile's text; in an idle process little else, in a busy one a lot: 5 s after
	// converging, 132 MiB against 91 in use).
	allocated float64
}

// String gives the measure in MiB.
func (h heapMeasure) String() string {
	return fmt.Sprintf("%.1f MiB (heap profile: %.1f ± %.1f MiB)", h.allocated/(1<<20), h.inUse/(1<<20), h.inUseSE/(1<<20))
}

// heapFromProfile reads a heap profile's text form (debug=1).
func heapFromProfile(text []byte) (heapMeasure, error) {
	var h heapMeasure
	m := heapRateRE.FindSubmatch(text)
	if m == nil {
		return h, fmt.Errorf("no heap profile header")
	}
	twiceRate, _ := strconv.ParseFloat(string(m[1]), 64)
	rate := twiceRate / 2
	variance := 0.0
	for _, r := range heapRecordRE.FindAllSubmatch(text, -1) {
		count, _ := strconv.ParseFloat(string(r[1]), 64)
		size, _ := strconv.ParseFloat(string(r[2]), 64)
		if count == 0 || size == 0 {
			continue
		}
		p := 1.0 // the chance that one of the record's objects is sampled
		if rate > 1 {
			p = 1 - math.Exp(-size/count/rate)
		}
		h.inUse += size / p
		// Each sampled object stands for size/count/p bytes, with variance (1-p) times its square.
		variance += count * (1 - p) * math.Pow(size/count/p, 2)
	}
	h.inUseSE = math.Sqrt(variance)
	if m := heapAllocRE.FindSubmatch(text); m != nil {
		h.allocated, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	return h, nil
}

// liveHeap returns the process's heap right after a garbage collection it asks for. When
// -profiles names a directory, the heap profile goes there as name.heap.
func (p *process) liveHeap(name string) (heapMeasure, error) {
	resp, err := http.Get("http://" + p.pprof + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return heapMeasure{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return heapMeasure{}, err
	}
	if *profiles != "" {
		if err := p.saveHeapProfile(name); err != nil {
			return heapMeasure{}, err
		}
	}
	h, err := heapFromProfile(body)
	if err != nil {
		return h, fmt.Errorf("the heap profile of %s: %w", p.c.name, err)
	}
	return h, nil
}

// saveHeapProfile writes the process's heap profile (symbolized) to name.heap under -profiles.
func (p *process) saveHeapProfile(name string) error {
	resp, err := http.Get("http://" + p.pprof + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := os.Create(filepath.Join(*profiles, name+".heap"))
	if err == nil {
		_, err = io.Copy(out, resp.Body)
		out.Close()
	}
	return err
}

// reconciles returns how many reconciles the process has finished.
func (p *process) reconciles() (float64, error) {
	n, _, err := p.work("")
	return n, err
}

// work returns how many reconciles the process has finished and, for the operator (the peer's
// queues are not counted), how many objects wait in its work queues: of controller only, unless
// it is "". The operator's reconciles held by a warm shard (result "held": they wait to write,
// and run again once it may) are not finished.
func (p *process) work(controller string) (reconciles, depth float64, err error) {
	families, err := p.scrape()
	if err != nil {
		return 0, 0, err
	}
	for name, sum := range map[string]*float64{p.c.reconciles: &reconciles, "evalsi_workqueue_depth": &depth} {
		for _, m := range families[name].GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "result" && l.GetValue() == "held" }) {
				continue
			}
			if controller == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == controller }) {
				*sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() // the one it is not reads 0
			}
		}
	}
	return reconciles, depth, nil
}

// scrape reads the process's metrics.
func (p *process) scrape() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// profile records, when -profiles names a directory, a CPU profile of the process's next
// seconds into name.pprof there; the channel closes when it is written.
func profile(b testing.TB, p *process, name string, seconds int) <-chan struct{} {
	done := make(chan struct{})
	if *profiles == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.pprof, seconds))
		if err != nil {
			b.Errorf("profiling %s: %v", p.c.name, err)
			return
		}
		defer resp.Body.Close()
		out, err := os.Create(filepath.Join(*profiles, name+".pprof"))
		if err == nil {
			_, err = io.Copy(out, resp.Body)
			out.Close()
		}
		if err != nil {
			b.Errorf("profiling %s: %v", p.c.name, err)
		}
	}()
	return done
}

// freeAddrs returns n free loopback addresses.
func freeAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out, nil
}
