package engine

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"evals.si/operator/shard"
)

// The engine's Events are fenced as its other writes are: under a tenure that ended, the
// recorder's write is tried and not sent; within one, or with no tenure, it is sent.
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
		{"no tenure (no leader election)", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			received := make(chan string, 16)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				received <- r.Method + " " + r.URL.Path
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				w.Write(body)
			}))
			defer srv.Close()
			// writes the fence was asked to send, counted once sent or refused: when one is
			// counted, the server has received it if it was sent.
			var tried atomic.Int32
			transport := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				defer tried.Add(1)
				return fenceWrites(http.DefaultTransport).RoundTrip(req)
			})
			kube, err := kubernetes.NewForConfigAndClient(&rest.Config{Host: srv.URL}, &http.Client{Transport: transport})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.tenure != nil {
				ctx = shard.WithTenure(ctx, tc.tenure)
			}
			recorder, stop := newEventRecorder(ctx, kube, "")
			defer stop()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p", UID: "u1"}}
			recorder.Event(pod, corev1.EventTypeNormal, "Tested", "an event")
			deadline := time.After(30 * time.Second)
			for tried.Load() == 0 {
				select {
				case <-deadline:
					t.Fatal("the recorder tried no write in 30 s")
				case <-time.After(10 * time.Millisecond):
				}
			}
			if !tc.sent {
				select {
				case got := <-received:
					t.Fatalf("sent %s under an ended tenure", got)
				default:
				}
				return
			}
			select {
			case got := <-received:
				if got != "POST /api/v1/namespaces/team-a/events" {
					t.Errorf("sent %s, want the Event's create", got)
				}
			case <-deadline:
				t.Fatal("the Event was not sent in 30 s")
			}
		})
	}
}

// eventSink's writes fail with a TenureOverError, unsent, once the tenure of its context ended.
func TestEventSinkStopsAtAnEndedTenure(t *testing.T) {
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Add(1) }))
	defer srv.Close()
	kube, err := kubernetes.NewForConfigAndClient(&rest.Config{Host: srv.URL}, &http.Client{Transport: fenceWrites(http.DefaultTransport)})
	if err != nil {
		t.Fatal(err)
	}
	var ended shard.Tenure
	ended.Extend(time.Now().Add(-time.Minute), 10*time.Second)
	sink := eventSink{ctx: shard.WithTenure(context.Background(), &ended), events: kube.CoreV1().Events("")}
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "e"}}
	for name, write := range map[string]func() error{
		"create": func() error { _, err := sink.Create(event); return err },
		"update": func() error { _, err := sink.Update(event); return err },
		"patch":  func() error { _, err := sink.Patch(event, []byte(`{"count":2}`)); return err },
	} {
		if err := write(); !errors.As(err, new(*TenureOverError)) {
			t.Errorf("%s: err %v, want a TenureOverError", name, err)
		}
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("%d writes sent under an ended tenure", n)
	}
}
