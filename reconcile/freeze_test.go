package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/process"
	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
)

// TestFrozenReplicaWritesNothingOnceItsShardIsTaken runs two replicas of the operator as
// processes, each behind a proxy that records the object writes the API server accepted from
// it: over one shard (the default install: one leads, one stands by) and over two. The holder of
// the first shard is stopped (SIGSTOP, as a long pause of the process or its machine would) for
// longer than the Lease duration while its Evaluators change, so that the other replica takes
// the shard and applies the changes. When the stopped replica resumes, its watches bring the
// changes of its time away, and its shard's elector has not yet given up the Lease it no longer
// holds (client-go's elector gives up only a renew deadline after its last renewal attempt
// began): it must write nothing of a shard until it holds that shard again. (A write it had
// sent when it stopped can reach the API server later; no tenure calls that back, and the test
// counts what the replica sends once resumed.)
func TestFrozenReplicaWritesNothingOnceItsShardIsTaken(t *testing.T) {
	bin := clustertest.Operator(t) // built before the tests' clocks start
	t.Parallel()                   // see envMu
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d shards over 2 replicas", shards), func(t *testing.T) {
			t.Parallel()
			freezeReplica(t, bin, shards)
		})
	}
}

func freezeReplica(t *testing.T, bin string, shards int) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	const n = 12
	createJudges(t, ctx, ns, n)
	timings := process.LeaseTimings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	var replicas []*replicaProcess
	for range 2 {
		replicas = append(replicas, startReplicaProcess(t, ctx, bin, ns, shards, timings))
	}
	cs := env.Clientset()
	leaseOf := func(i int) (holder string, acquired time.Time, err error) {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, process.ShardLease("evalsi-operator", shard.Shard{Index: i, Count: shards}), metav1.GetOptions{})
		if err != nil {
			return "", time.Time{}, err
		}
		if l.Spec.AcquireTime != nil {
			acquired = l.Spec.AcquireTime.Time
		}
		return holding.LeaseHolder(l, time.Now()), acquired, nil
	}
	var victim, other *replicaProcess
	clustertest.Eventually(t, ctx, "the replicas sharing the shards", func() error {
		var holders []string
		for i := range shards {
			h, _, err := leaseOf(i)
			if err != nil {
				return err
			}
			holders = append(holders, h)
		}
		for _, r := range replicas {
			// Both must be known: with one shard, the Lease names no one between the victim's
			// Lease running out and the other taking it, and an unknown ("") other would match
			// that, dating the takeover to the victim's own acquisition.
			if r.identity = r.loggedIdentity(); r.identity == "" {
				return fmt.Errorf("a replica has not logged its identity yet")
			}
		}
		if slices.Contains(holders, "") || len(slices.Compact(slices.Sorted(slices.Values(holders)))) != shards {
			return fmt.Errorf("shards held by %v", holders)
		}
		for _, r := range replicas {
			if r.identity == holders[0] {
				victim = r
			} else {
				other = r
			}
		}
		if victim == nil || other == nil {
			return fmt.Errorf("shards held by %v, replicas %s and %s", holders, replicas[0].identity, replicas[1].identity)
		}
		return nil
	})
	// The first shard needs an Evaluator: one chance in 4,096 that none of the n fell there, when
	// more are made, one at a time, until one does (a UID's shard is a coin toss: at most 64 more).
	judges := n
	var first []string // the Evaluators of the victim's shard
	var shardOf map[string]int
	for ; ; judges++ {
		shardOf = shardsOfEvaluators(t, ctx, ns, shards)
		for name, i := range shardOf {
			if i == 0 {
				first = append(first, name)
			}
		}
		if len(first) > 0 {
			break
		}
		if judges == n+64 {
			t.Fatalf("none of %d Evaluators fell in the first of %d shards", judges, shards)
		}
		create(t, ctx, evalsi.Evaluators, ns, "Evaluator", fmt.Sprintf("judge-%d", judges), map[string]any{})
	}
	waitJudgesAvailable(t, ctx, ns, judges)

	// The first shard's Evaluators change every 100 ms, from before the stop to after the
	// resume: each change is a new rendering of its pool.
	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		evaluators := env.Dynamic().Resource(evalsi.Evaluators).Namespace(ns)
		for round := 0; churnCtx.Err() == nil; round++ {
			for _, name := range first {
				patch := fmt.Sprintf(`{"spec":{"args":["--round=%d"]}}`, round)
				if _, err := evaluators.Patch(churnCtx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && churnCtx.Err() == nil {
					t.Errorf("changing Evaluator %s: %v", name, err)
					return
				}
			}
			select {
			case <-churnCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() {
		stopChurn()
		<-churned
	}()
	time.Sleep(time.Second)
	victim.signal(t, syscall.SIGSTOP)
	clustertest.Eventually(t, ctx, "the first shard taken by the other replica", func() error {
		h, _, err := leaseOf(0)
		if err != nil {
			return err
		}
		if h != other.identity {
			return fmt.Errorf("held by %q", h)
		}
		return nil
	})
	time.Sleep(time.Second) // the other replica applies a few of the changes
	// What the proxy receives from the replica before this instant it sent before it stopped: a
	// write past the tenure's check when the stop came, whose bytes the proxy reads late (the
	// test process is busy too). No tenure can call that back; the resumed replica's own writes
	// are the ones that follow.
	resumed := time.Now()
	victim.signal(t, syscall.SIGCONT)
	// Past the renew deadline of every elector the stopped replica ran, and a few of its rounds:
	// it has given up what it lost, and taken back its share as the other hands it over.
	time.Sleep(timings.RenewDeadline + 2*timings.LeaseDuration)
	stopChurn()
	<-churned

	held := map[int]time.Time{} // the victim's shards now, by when it took them
	share := shards / len(replicas)
	clustertest.Eventually(t, ctx, "the resumed replica holding its share again", func() error {
		clear(held)
		for i := range shards {
			h, acquired, err := leaseOf(i)
			if err != nil {
				return err
			}
			if h == victim.identity {
				held[i] = acquired
			}
		}
		if len(held) != share {
			return fmt.Errorf("it holds %d shards, want %d", len(held), share)
		}
		return nil
	})
	// From its resumption on, the resumed replica writes only what it holds again.
	checkWritesOfHeldShards(t, "the resumed replica", victim.proxy.writesSince(resumed), shardOf, held)
}

// replicaProcess is a replica of the operator run as a process, behind its own recording proxy.
type replicaProcess struct {
	cmd      *exec.Cmd
	logs     syncBuffer
	proxy    *writeRecorder
	identity string
}

// startReplicaProcess starts `evalsi-operator run` for the Evaluators of ns with shards, through a
// recording proxy; the test's end stops it.
func startReplicaProcess(t *testing.T, ctx context.Context, bin, ns string, shards int, timings process.LeaseTimings) *replicaProcess {
	t.Helper()
	r := &replicaProcess{proxy: newWriteRecorder(t)}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: proxy, cluster: {server: %q}}]
users: [{name: proxy, user: {}}]
contexts: [{name: proxy, context: {cluster: proxy, user: proxy}}]
current-context: proxy
`, r.proxy.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.CommandContext(ctx, bin, "run", "--kubeconfig="+kubeconfig, "--namespace="+ns,
		"--controllers=evaluator", "--leader-elect", "--leader-election-namespace="+ns, fmt.Sprintf("--shards=%d", shards),
		"--leader-elect-lease-duration="+timings.LeaseDuration.String(), "--leader-elect-renew-deadline="+timings.RenewDeadline.String(),
		"--leader-elect-retry-period="+timings.RetryPeriod.String(), "--discovery-interval=300ms",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--log-format=json",
		"--default-image="+testOptions.DefaultImage, "--api-url="+testOptions.APIURL)
	r.cmd.Stdout, r.cmd.Stderr = &r.logs, &r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.cmd.Wait()
	}()
	t.Cleanup(func() {
		// A stopped process takes no SIGTERM until it goes on.
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = r.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("replica %s's log:\n%s", r.identity, r.logs.String())
		}
	})
	return r
}

var loggedIdentity = regexp.MustCompile(`"msg":"holding shards".*?"identity":"([^"]+)"`)

// loggedIdentity returns the identity the replica logged, "" before it did.
func (r *replicaProcess) loggedIdentity() string {
	if m := loggedIdentity.FindStringSubmatch(r.logs.String()); m != nil {
		return m[1]
	}
	return ""
}

func (r *replicaProcess) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %s: %v", sig, err)
	}
}

// writeRecorder is a proxy to the test's API server that records each write of an object
// (not a Lease, not an Event) that the API server accepted, and when the proxy received it.
type writeRecorder struct {
	*httptest.Server
	mu     sync.Mutex
	writes []objectWrite
}

func newWriteRecorder(t *testing.T) *writeRecorder {
	t.Helper()
	w := &writeRecorder{}
	proxy := apiServerProxy(t)
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		at := time.Now()
		if !isObjectWrite(req) {
			proxy.ServeHTTP(rw, req)
			return
		}
		sw := &statusWriter{ResponseWriter: rw}
		proxy.ServeHTTP(sw, req)
		if sw.code < 300 {
			w.mu.Lock()
			w.writes = append(w.writes, objectWrite{path: req.URL.Path, at: at})
			w.mu.Unlock()
		}
	}))
	t.Cleanup(w.Close)
	return w
}

// writesSince returns the writes received from t on.
func (w *writeRecorder) writesSince(t time.Time) []objectWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(w.writes), func(o objectWrite) bool { return o.at.Before(t) })
}

// apiServerProxy passes requests on to the test control plane with the admin identity; watches
// stream through it.
func apiServerProxy(t *testing.T) *httputil.ReverseProxy {
	t.Helper()
	target, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, Transport: transport, FlushInterval: -1}
}

// statusWriter remembers the status code written through it (200 when none is).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's Flush.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
