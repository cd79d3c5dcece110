package evalsid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsid"
)

// slowClasses is a Directory whose class checks wait until release is closed, as a read of the
// API server for a class the cache lacks may.
type slowClasses struct {
	entered     chan struct{}
	enteredOnce sync.Once
	release     chan struct{}
}

func (d *slowClasses) Project(namespace string) (string, error) { return namespace, nil }

func (d *slowClasses) MayUseClass(string, string) (bool, error) {
	d.enteredOnce.Do(func() { close(d.entered) })
	<-d.release
	return true, nil
}

// TestSlowClassCheckHoldsNoOtherCall makes a run's class check wait, as a read of the API server
// does, and reads a run meanwhile: the server answers it, as it must answer every other caller.
func TestSlowClassCheckHoldsNoOtherCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := evalsid.New(map[string]string{"op": "system:serviceaccount:team-a:evalsi-operator"}, evalsid.Schedule{})
	dir := &slowClasses{entered: make(chan struct{}), release: make(chan struct{})}
	srv.SetDirectory(dir)
	base := serveLoopback(t, ctx, srv)
	a := newAPI(base, "op")

	created := make(chan error, 1)
	go func() {
		_, err := a.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{Project: "team-a", IdempotencyKey: "k", Spec: runSpec("slow")}))
		created <- err
	}()
	select {
	case <-dir.entered:
	case <-ctx.Done():
		t.Fatal("the class check never started")
	}
	readCtx, cancelRead := context.WithTimeout(ctx, 5*time.Second)
	defer cancelRead()
	_, err := a.runs.GetRun(readCtx, connect.NewRequest(&v1.GetRunRequest{Project: "team-a", Id: "run-none"}))
	if code(err) != connect.CodeNotFound {
		t.Errorf("reading a run while a class check waits: %v, want NotFound at once", err)
	}
	close(dir.release)
	if err := <-created; err != nil {
		t.Errorf("the run whose class check waited: %v", err)
	}
}
