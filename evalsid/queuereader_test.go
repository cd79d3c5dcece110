package evalsid_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsid"
)

// TestPlatformQueueReader: the identity the server trusts as the platform's queue reader (KEDA's
// one account, TrustQueueReader) reads the queue depth of every namespace's pools and of the
// SandboxClasses, and nothing else; the same account untrusted is an ordinary queue reader of its
// own namespace, and reads no team's queue.
func TestPlatformQueueReader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const keda = "system:serviceaccount:keda:evalsi-queue-reader"
	for _, trusted := range []bool{true, false} {
		srv := evalsid.New(map[string]string{"keda": keda}, evalsid.Schedule{})
		srv.SetSandboxNamespace("evalsi-sandbox")
		if trusted {
			srv.TrustQueueReader(keda)
		}
		srv.SetQueueDepth("team-a", v1.PoolKind_POOL_KIND_EVALUATOR, "judge", 4)
		api := newAPI(serveLoopback(t, ctx, srv), "keda")
		depth := func(project, namespace string, kind v1.PoolKind, name string) error {
			_, err := api.queues.GetQueueDepth(ctx, connect.NewRequest(&v1.GetQueueDepthRequest{Project: project, Namespace: namespace, Kind: kind, Name: name}))
			return err
		}
		for what, err := range map[string]error{
			"team-a's judge queue": depth("team-a", "team-a", v1.PoolKind_POOL_KIND_EVALUATOR, "judge"),
			"team-b's queue":       depth("team-b", "team-b", v1.PoolKind_POOL_KIND_EVALUATOR, "judge"),
			"a SandboxClass queue": depth("", "", v1.PoolKind_POOL_KIND_SANDBOX, "landlock"),
		} {
			if trusted && err != nil {
				t.Errorf("the platform's queue reader reading %s: %v", what, err)
			}
			if !trusted && connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("the same account, untrusted, reading %s: %v, want PermissionDenied", what, err)
			}
		}
		if !trusted {
			continue
		}
		for method, err := range map[string]error{
			"GetRun": func() error {
				_, err := api.runs.GetRun(ctx, connect.NewRequest(&v1.GetRunRequest{Project: "team-a", Id: "x"}))
				return err
			}(),
			"BatchGetRuns": func() error {
				_, err := api.runs.BatchGetRuns(ctx, connect.NewRequest(&v1.BatchGetRunsRequest{Project: "team-a"}))
				return err
			}(),
			"CreateRun": func() error {
				_, err := api.runs.CreateRun(ctx, connect.NewRequest(&v1.CreateRunRequest{Project: "team-a", IdempotencyKey: "k", Spec: runSpec("")}))
				return err
			}(),
			"EnqueueTrial": func() error {
				_, err := api.queues.EnqueueTrial(ctx, connect.NewRequest(&v1.EnqueueTrialRequest{Project: "team-a", RunId: "x", Trial: "t"}))
				return err
			}(),
		} {
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("the platform's queue reader calling %s: %v, want PermissionDenied", method, err)
			}
		}
	}
}
