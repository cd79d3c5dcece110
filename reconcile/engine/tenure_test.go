package engine

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"evals.si/operator/shard"
)

// A write made under a tenure that ended is not sent; reads, writes within a tenure and writes
// under none are.
func TestFenceWritesStopsWritesOfAnEndedTenure(t *testing.T) {
	var received atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { received.Add(1) }))
	defer srv.Close()
	client := &http.Client{Transport: fenceWrites(http.DefaultTransport)}
	var ended, held shard.Tenure
	ended.Extend(time.Now().Add(-time.Minute), 10*time.Second)
	held.Extend(time.Now(), time.Hour)
	for _, tc := range []struct {
		name   string
		method string
		tenure *shard.Tenure
		sent   bool
	}{
		{"a read, ended", http.MethodGet, &ended, true},
		{"an apply, ended", http.MethodPatch, &ended, false},
		{"a status write, ended", http.MethodPut, &ended, false},
		{"a create, ended", http.MethodPost, &ended, false},
		{"a delete, ended", http.MethodDelete, &ended, false},
		{"an apply, held", http.MethodPatch, &held, true},
		{"an apply, never extended", http.MethodPatch, &shard.Tenure{}, false},
		{"an apply, no tenure (no leader election)", http.MethodPatch, nil, true},
	} {
		ctx := context.Background()
		if tc.tenure != nil {
			ctx = shard.WithTenure(ctx, tc.tenure)
		}
		req, err := http.NewRequestWithContext(ctx, tc.method, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		before := received.Load()
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if sent := received.Load() > before; sent != tc.sent {
			t.Errorf("%s: sent %v, want %v (err %v)", tc.name, sent, tc.sent, err)
		}
		if !tc.sent && !errors.As(err, new(*TenureOverError)) {
			t.Errorf("%s: err %v, want a TenureOverError", tc.name, err)
		}
	}
}
