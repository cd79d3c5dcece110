package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/apiclient/evalsiv1/evalsiv1connect"
	"evals.si/operator/cluster/clustertest"
)

// TestEvalsidTrustsOperatorsOnlyWhereTold runs the evalsid command as a platform would, and
// calls it as the evalsi-operator account of team-a: without --operator-namespace that account
// is what any namespace editor can make, and may not create a run in someone's name; named by
// the flag, it is the operator. Its metrics (--metrics-bind-address) count the runs it holds.
func TestEvalsidTrustsOperatorsOnlyWhereTold(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("t1 system:serviceaccount:team-a:evalsi-operator\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		flags []string
		want  connect.Code
	}{
		"no operator namespace":       {want: connect.CodePermissionDenied},
		"another operator namespace":  {flags: []string{"--operator-namespace=team-b"}, want: connect.CodePermissionDenied},
		"team-a's operator namespace": {flags: []string{"--operator-namespace=team-b", "--operator-namespace=team-a"}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			m, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr, metrics := l.Addr().String(), m.Addr().String()
			l.Close()
			m.Close()
			args := append([]string{"evalsi-operator", "evalsid", "--listen=" + addr, "--tokens=" + tokens, "--metrics-bind-address=" + metrics}, tc.flags...)
			done := make(chan int)
			go func() { done <- execute(ctx, args, strings.NewReader(""), io.Discard, io.Discard) }()
			defer func() { cancel(); clustertest.Await(t, "evalsid", done) }()

			runs := evalsiv1connect.NewRunServiceClient(http.DefaultClient, "http://"+addr)
			req := connect.NewRequest(&v1.CreateRunRequest{Project: "team-a", IdempotencyKey: "k", Creator: "alice",
				Spec: &v1.RunSpec{Suite: "smoke", Target: &v1.Target{Endpoint: &v1.EndpointTarget{Url: "http://m:8000/v1", Model: "m"}}}})
			req.Header().Set("Authorization", "Bearer t1")
			for {
				_, err = runs.CreateRun(ctx, req)
				if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
					break // not merely "not listening yet"
				}
				time.Sleep(50 * time.Millisecond)
			}
			var got connect.Code
			if err != nil {
				got = connect.CodeOf(err)
			}
			if got != tc.want {
				t.Errorf("CreateRun as team-a's evalsi-operator: %v, want code %v", err, tc.want)
			}
			// Its metrics count the runs it holds (run ids cannot be guessed, so that is how they are counted).
			resp, err := http.Get("http://" + metrics + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if held := strings.Contains(string(body), `evalsid_runs{project="team-a"} 1`); held != (tc.want == 0) {
				t.Errorf("evalsid's metrics say it holds team-a's run: %v, want %v:\n%s", held, tc.want == 0, body)
			}
		})
	}
}
