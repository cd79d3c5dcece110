package reconcile

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestManagerLeadsServesHealthAndMetrics runs the manager as `run` does: it takes the Lease,
// reconciles, and serves /healthz, /readyz and /metrics.
func TestManagerLeadsServesHealthAndMetrics(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	health, metrics := freeAddr(t), freeAddr(t)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- RunManager(mctx, ManagerConfig{
			Engine: Config{Rest: env.Config, Namespace: ns, Render: testOptions,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			LeaderElect: true, LeaderElectionNamespace: ns, LeaderElectionName: "evalsi-operator",
			HealthAddr: health, MetricsAddr: metrics,
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	create(t, ctx, EvaluatorsGVR, ns, "Evaluator", "judge", map[string]any{})
	waitReady(t, ctx, EvaluatorsGVR, ns, "judge", "True", "Available")

	lease, err := env.Clientset().CoordinationV1().Leases(ns).Get(ctx, "evalsi-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Error("the Lease has no holder")
	}
	for _, c := range []struct{ url, want string }{
		{"http://" + health + "/healthz", "ok"},
		{"http://" + health + "/readyz", "ok"},
		{"http://" + metrics + "/metrics", `evalsi_reconcile_total{controller="evaluator",result="success"}`},
		{"http://" + metrics + "/metrics", `evalsi_workqueue_depth{name="evaluator"}`},
		{"http://" + metrics + "/metrics", `evalsi_kube_requests_total{code="201",resource="deployments",verb="PATCH"}`},
	} {
		eventually(t, ctx, c.url, func() error {
			resp, err := http.Get(c.url)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(string(body), c.want) {
				return fmt.Errorf("%s: %d, body lacks %q", c.url, resp.StatusCode, c.want)
			}
			return nil
		})
	}
}
