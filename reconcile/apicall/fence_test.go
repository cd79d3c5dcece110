package apicall

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"evals.si/operator/apiclient"
	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsid"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/shard"
)

// Against the reference evalsid over Connect on loopback: a call that changes something, made
// under an ended tenure, never reaches the server, and is neither observed nor wrapped into a
// status; reads, and calls within a tenure or under none, are sent.
func TestFenceCallsHoldsEvalsidCallsToTheTenure(t *testing.T) {
	srv := evalsid.New(map[string]string{"token": "system:serviceaccount:evalsi:evalsi-operator"}, evalsid.Schedule{})
	srv.TrustPlatform("system:serviceaccount:evalsi:evalsi-operator")
	server := httptest.NewServer(srv.Handler())
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	observed := map[string]int{}
	api, err := apiclient.New(apiclient.Options{URL: server.URL, TokenFile: token,
		Interceptors: []connect.Interceptor{FenceCalls()},
		Observe:      func(method, _ string, _ time.Duration) { observed[method]++ }})
	if err != nil {
		t.Fatal(err)
	}

	var ended, held shard.Tenure
	ended.Extend(time.Now().Add(-time.Minute), 10*time.Second)
	held.Extend(time.Now(), time.Hour)
	policy := &v1.PolicySpec{TraceSource: "prod", SamplingRate: 0.5, Evaluators: []string{"toxicity"}}
	calls := map[string]func(context.Context) error{
		"PutPolicy": func(ctx context.Context) error {
			_, err := api.Monitor.PutPolicy(ctx, connect.NewRequest(&v1.PutPolicyRequest{Project: "team-a", Name: "toxicity", Spec: policy}))
			return err
		},
		"GetPolicy": func(ctx context.Context) error {
			_, err := api.Monitor.GetPolicy(ctx, connect.NewRequest(&v1.GetPolicyRequest{Project: "team-a", Name: "toxicity"}))
			return err
		},
		"DeletePolicy": func(ctx context.Context) error {
			_, err := api.Monitor.DeletePolicy(ctx, connect.NewRequest(&v1.DeletePolicyRequest{Project: "team-a", Name: "toxicity"}))
			return err
		},
		"CancelRun": func(ctx context.Context) error {
			_, err := api.Runs.CancelRun(ctx, connect.NewRequest(&v1.CancelRunRequest{Project: "team-a", Id: "r-1"}))
			return err
		},
		"GetRun": func(ctx context.Context) error {
			_, err := api.Runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: "team-a", Id: "r-1"}))
			return err
		},
		"BatchGetRuns": func(ctx context.Context) error {
			_, err := api.Runs.BatchGetRuns(ctx, connect.NewRequest(&v1.BatchGetRunsRequest{Project: "team-a", Ids: []string{"r-1"}}))
			return err
		},
	}
	for _, tc := range []struct {
		name   string
		method string
		tenure *shard.Tenure
		sent   bool
	}{
		{"a put, ended", "PutPolicy", &ended, false},
		{"a delete, ended", "DeletePolicy", &ended, false},
		{"a cancel, ended", "CancelRun", &ended, false},
		{"a read, ended", "GetPolicy", &ended, true},
		{"a read of a run, ended", "GetRun", &ended, true},
		{"a batch read, ended", "BatchGetRuns", &ended, true},
		{"a put, never extended", "PutPolicy", &shard.Tenure{}, false},
		{"a put, held", "PutPolicy", &held, true},
		{"a delete, no tenure (no leader election)", "DeletePolicy", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctx
			if tc.tenure != nil {
				ctx = shard.WithTenure(ctx, tc.tenure)
			}
			before, observedBefore := srv.Calls(tc.method), observed[tc.method]
			err := calls[tc.method](ctx)
			if sent := srv.Calls(tc.method) > before; sent != tc.sent {
				t.Fatalf("sent %v, want %v (err %v)", sent, tc.sent, err)
			}
			if tc.sent {
				if observed[tc.method] != observedBefore+1 {
					t.Errorf("observed %d times, want once", observed[tc.method]-observedBefore)
				}
				return
			}
			if !errors.As(err, new(*engine.TenureOverError)) {
				t.Fatalf("err %v, want a TenureOverError", err)
			}
			if observed[tc.method] != observedBefore {
				t.Errorf("a call not sent was observed")
			}
			// The engine requeues it (no status): Failure keeps it as it is.
			failure := Failure("putting the policy", err)
			if !errors.As(failure, new(*engine.TenureOverError)) || errors.As(failure, new(*engine.Failed)) {
				t.Errorf("Failure(%v) = %#v, want the TenureOverError, without a status", err, failure)
			}
		})
	}
}
