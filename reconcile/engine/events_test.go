package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/shard"
)

// roundTripper is a function that is an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// eventsNamespace makes a namespace of the shared control plane for one test's Events.
func eventsNamespace(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string) string {
	t.Helper()
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-", "(", "", ")", "").Replace(name))
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	return ns
}

// fencedClient is a client of the real API server whose writes go through the engine's fence, as
// the engine's own do; tried counts the writes the fence was asked to send, once sent or refused.
func fencedClient(t *testing.T) (kube kubernetes.Interface, tried *atomic.Int32) {
	t.Helper()
	cfg := rest.CopyConfig(shared.Get(t).Config)
	tried = &atomic.Int32{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		fenced := engine.FenceWrites(rt)
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet {
				defer tried.Add(1)
			}
			return fenced.RoundTrip(req)
		})
	})
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube, tried
}

// logLines is a logr sink that keeps the lines logged to it: errors apart from the rest.
type logLines struct {
	mu           *sync.Mutex
	errors, info *[]string
}

func newLogLines() logLines {
	return logLines{mu: &sync.Mutex{}, errors: new([]string), info: new([]string)}
}
func (l logLines) Init(logr.RuntimeInfo)  {}
func (l logLines) Enabled(level int) bool { return level <= 1 }
func (l logLines) Info(level int, msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.info = append(*l.info, fmt.Sprint(msg, kv))
}
func (l logLines) Error(err error, msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.errors = append(*l.errors, fmt.Sprint(msg, ": ", err))
}
func (l logLines) WithValues(...any) logr.LogSink { return l }
func (l logLines) WithName(string) logr.LogSink   { return l }
func (l logLines) lines() (errors, info []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), *l.errors...), append([]string(nil), *l.info...)
}

// The engine's Events are fenced as its other writes are, on the real API server: under a
// tenure that ended, the recorder's write is tried and not sent, and the broadcaster says so at
// verbosity 1, not as an error (a hold ending is expected); within one, or with no tenure, the
// Event is created.
func TestEventsOfAnEndedTenureAreNotSent(t *testing.T) {
	var ended, held shard.Tenure
	ended.Extend(time.Now().Add(-time.Minute), 10*time.Second)
	held.Extend(time.Now(), time.Hour)
	for _, tc := range []struct {
		name   string
		tenure *shard.Tenure
		sent   bool
	}{
		{"ended", &ended, false},
		{"held", &held, true},
		{"no tenure", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			kube, tried := fencedClient(t)
			ns := eventsNamespace(t, ctx, shared.Get(t).Clientset(), "events-"+tc.name)
			logs := newLogLines()
			rctx := klog.NewContext(ctx, logr.New(logs))
			if tc.tenure != nil {
				rctx = shard.WithTenure(rctx, tc.tenure)
			}
			recorder, stop := engine.NewEventRecorder(rctx, kube, "")
			defer stop()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", UID: "u1"}}
			recorder.Event(pod, corev1.EventTypeNormal, "Tested", "an event")
			events := func() int {
				list, err := shared.Get(t).Clientset().CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return len(list.Items)
			}
			if tc.sent {
				clustertest.Eventually(t, ctx, "the Event created", func() error {
					if n := events(); n != 1 {
						return fmt.Errorf("%d Events", n)
					}
					return nil
				})
				return
			}
			clustertest.Eventually(t, ctx, "the recorder's write tried and its refusal logged", func() error {
				if errs, info := logs.lines(); tried.Load() == 0 || len(errs)+len(info) == 0 {
					return fmt.Errorf("%d writes tried, nothing logged", tried.Load())
				}
				return nil
			})
			if n := events(); n != 0 {
				t.Errorf("%d Events created under an ended tenure", n)
			}
			errs, info := logs.lines()
			if len(errs) > 0 {
				t.Fatalf("a tenure's end logged as an error: %q", errs)
			}
			if !strings.Contains(info[0], "hold on its shard ended") {
				t.Errorf("the refusal logged as %q, want the hold's end named", info[0])
			}
		})
	}
}

// eventSink's writes fail with a TenureOverError, unsent, once the tenure of its context ended:
// the real API server holds no Event after them.
func TestEventSinkStopsAtAnEndedTenure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kube, tried := fencedClient(t)
	ns := eventsNamespace(t, ctx, shared.Get(t).Clientset(), "events-sink")
	var ended shard.Tenure
	ended.Extend(time.Now().Add(-time.Minute), 10*time.Second)
	sink := engine.NewEventSink(shard.WithTenure(ctx, &ended), kube.CoreV1().Events(""))
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "p"}, Reason: "Tested", Type: corev1.EventTypeNormal}
	for name, write := range map[string]func() error{
		"create": func() error { _, err := sink.Create(event); return err },
		"update": func() error { _, err := sink.Update(event); return err },
		"patch":  func() error { _, err := sink.Patch(event, []byte(`{"count":2}`)); return err },
	} {
		if err := write(); !errors.As(err, new(*engine.TenureOverError)) {
			t.Errorf("%s: err %v, want a TenureOverError", name, err)
		}
	}
	if n := tried.Load(); n != 3 {
		t.Errorf("%d writes reached the fence, want 3", n)
	}
	list, err := shared.Get(t).Clientset().CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d Events on the API server after writes under an ended tenure", len(list.Items))
	}
}

// The engines of a process's shards write their Events through one set of broadcasters, each
// Event by the client of the engine that holds its object's shard, on the real API server; an
// Event of a shard that no engine holds any more is dropped, not sent by another's client.
func TestEventsOfAProcessShareOneSetOfBroadcasters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := eventsNamespace(t, ctx, shared.Get(t).Clientset(), "events-shared")
	events := engine.NewEvents("")
	const shards = 3
	tried := make([]*atomic.Int32, shards)
	leave := make([]func(), shards)
	recorders := make([]record.EventRecorder, shards)
	for i := range shards {
		var kube kubernetes.Interface
		kube, tried[i] = fencedClient(t)
		recorders[i], leave[i] = events.Join(ctx, shard.Shard{Index: i, Count: shards}, kube)
	}
	defer func() {
		for _, l := range leave[:shards-1] {
			l()
		}
	}()
	if n := events.Starts(); n != 1 {
		t.Fatalf("%d sets of broadcasters started for %d shards, want 1", n, shards)
	}
	// podOf returns a pod whose UID falls in shard i.
	podOf := func(i int, name string) *corev1.Pod {
		for n := 0; ; n++ {
			uid := fmt.Sprintf("%s-%d", name, n)
			if (shard.Shard{Index: i, Count: shards}).Contains(uid) {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
			}
		}
	}
	listed := func() map[string]bool {
		list, err := shared.Get(t).Clientset().CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, e := range list.Items {
			out[e.InvolvedObject.Name] = true
		}
		return out
	}
	// Recorded through the first engine's recorder (the same lines), each Event goes to its shard's client.
	for i := range shards {
		recorders[0].Event(podOf(i, fmt.Sprintf("p%d", i)), corev1.EventTypeNormal, "Tested", "an event")
	}
	clustertest.Eventually(t, ctx, "an Event of each shard's pod", func() error {
		if got := listed(); len(got) != shards {
			return fmt.Errorf("Events of %v", got)
		}
		for i, n := range tried {
			if n.Load() != 1 {
				return fmt.Errorf("shard %d's client wrote %d Events, want 1 (its own pod's)", i, n.Load())
			}
		}
		return nil
	})

	// The last shard's engine leaves: its pod's Event is dropped, the others are written.
	leave[shards-1]()
	recorders[0].Event(podOf(shards-1, "gone"), corev1.EventTypeNormal, "Tested", "an event")
	recorders[0].Event(podOf(0, "kept"), corev1.EventTypeNormal, "Tested", "an event")
	clustertest.Eventually(t, ctx, "the kept pod's Event written and the gone one's dropped", func() error {
		if !listed()["kept"] || events.Dropped() != 1 {
			return fmt.Errorf("Events of %v, %d dropped", listed(), events.Dropped())
		}
		return nil
	})
	if listed()["gone"] {
		t.Error("an Event of a shard no engine holds was written")
	}
	if n := tried[shards-1].Load(); n != 1 {
		t.Errorf("the departed shard's client wrote %d Events, want its first only", n)
	}
}
