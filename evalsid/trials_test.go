package evalsid_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsid"
)

// TestEnqueueTrialIsBounded has a pool hand on trials as a pod of its namespace could, any number
// of times: each trial waits once, a run queues at most its bound, and a run that has ended
// queues none.
func TestEnqueueTrialIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := evalsid.New(map[string]string{
		"op":   "system:serviceaccount:team-a:evalsi-operator",
		"pool": "system:serviceaccount:team-a:judge",
	}, evalsid.Schedule{})
	evalsid.LimitTrialsPerRun(srv, 3)
	url := serveLoopback(t, ctx, srv)
	op, pool := newAPI(url, "op"), newAPI(url, "pool")
	newRun := func(key string) string {
		resp, err := op.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{Project: "team-a", IdempotencyKey: key, Spec: runSpec("open")}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.Run.Id
	}
	running, ended := newRun("running"), newRun("ended")
	if err := srv.SetPhase(ended, v1.Phase_PHASE_SUCCEEDED); err != nil {
		t.Fatal(err)
	}
	enqueue := func(run, trial string) (uint32, error) {
		resp, err := pool.queues.EnqueueTrial(ctx, connect.NewRequest(&v1.EnqueueTrialRequest{Project: "team-a", RunId: run, Trial: trial}))
		if err != nil {
			return 0, err
		}
		return resp.Msg.Depth, nil
	}
	for _, tc := range []struct {
		name, run, trial string
		want             connect.Code
		depth            uint32
	}{
		{name: "a first trial", run: running, trial: "case-1/1", depth: 1},
		{name: "the same trial again", run: running, trial: "case-1/1", depth: 1},
		{name: "a second trial", run: running, trial: "case-2/1", depth: 2},
		{name: "no trial name", run: running, want: connect.CodeInvalidArgument},
		{name: "a trial name past its bound", run: running, trial: strings.Repeat("x", 257), want: connect.CodeInvalidArgument},
		{name: "the run's last trial", run: running, trial: "case-3/1", depth: 3},
		{name: "one trial past the run's bound", run: running, trial: "case-4/1", want: connect.CodeResourceExhausted},
		{name: "a trial already queued, at the bound", run: running, trial: "case-2/1", depth: 3},
		{name: "a run that has ended", run: ended, trial: "case-1/1", want: connect.CodeFailedPrecondition},
	} {
		depth, err := enqueue(tc.run, tc.trial)
		if (err == nil) != (tc.want == 0) || (err != nil && connect.CodeOf(err) != tc.want) {
			t.Errorf("%s: %v, want code %v", tc.name, err, tc.want)
			continue
		}
		if err == nil && depth != tc.depth {
			t.Errorf("%s: the class's queue holds %d, want %d", tc.name, depth, tc.depth)
		}
	}
}

// TestRunIDsCannotBeGuessed: a run id carries 128 random bits, so that knowing one run names no
// other.
func TestRunIDsCannotBeGuessed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := evalsid.New(map[string]string{"op": "system:serviceaccount:team-a:evalsi-operator"}, evalsid.Schedule{})
	op := newAPI(serveLoopback(t, ctx, srv), "op")
	form := regexp.MustCompile(`^run-[a-z2-7]{26}$`)
	seen := map[string]bool{}
	for i := range 50 {
		resp, err := op.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{Project: "team-a", IdempotencyKey: fmt.Sprint(i), Spec: runSpec("")}))
		if err != nil {
			t.Fatal(err)
		}
		id := resp.Msg.Run.Id
		if !form.MatchString(id) || seen[id] {
			t.Fatalf("run id %q: want run- and 26 base32 letters (128 random bits), each once", id)
		}
		seen[id] = true
	}
}

// TestRefusedPathsAreNotKept sends evalsid requests without a token to paths a caller made up:
// they are counted under one name, not each under its own, so the server holds nothing per path
// for a caller it has not authenticated.
func TestRefusedPathsAreNotKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := evalsid.New(map[string]string{}, evalsid.Schedule{})
	url := serveLoopback(t, ctx, srv)
	before := evalsid.CountedMethods(srv)
	for i := range 100 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/evalsi.v1.RunService/%s-%d", url, strings.Repeat("m", 1000), i), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := srv.Calls(evalsid.UnknownMethod); got != 100 {
		t.Errorf("%d refused calls counted as %s, want 100", got, evalsid.UnknownMethod)
	}
	if grown := evalsid.CountedMethods(srv) - before; grown > 1 {
		t.Errorf("the server counts calls under %d more names after 100 made-up paths, want at most 1", grown)
	}
}
