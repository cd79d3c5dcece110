// Package process is what the operator's process serves around its engine: /healthz and /readyz,
// /metrics (over HTTPS with TokenReview and SubjectAccessReview when secured), Go's profiles, and
// shards held on Leases (shards.go), so that each object is reconciled by one replica at a time,
// the shards spread over the replicas that are alive.
package process

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/uuid"

	"evals.si/operator/shard"
)

// NewIdentity returns a name for a replica: its host name (a pod's name) and a UUID, so that a
// restarted process is another holder.
func NewIdentity() string {
	host, _ := os.Hostname()
	return host + "_" + string(uuid.NewUUID())
}

// Run serves the process's endpoints (serving.go) and runs e on the shards this replica holds
// (shards.go; every object when it does not elect) until ctx ends or an engine fails.
func Run(ctx context.Context, cfg Config, e Engine) error {
	log := e.Log()
	count := max(cfg.Shards, 1)
	if err := shard.Validate(count); err != nil {
		return err
	}
	if count > 1 && !cfg.LeaderElect {
		return errNoElection
	}
	if cfg.Lease == (LeaseTimings{}) {
		cfg.Lease = DefaultLeaseTimings
	}
	if err := cfg.Lease.Validate(); err != nil {
		return err
	}
	var held atomic.Int32
	heldGauge := ShardsHeldMetric(func() float64 { return float64(held.Load()) })
	if err := e.Registry().Register(heldGauge); err != nil {
		return fmt.Errorf("registering the shards metric: %w", err)
	}
	defer e.Registry().Unregister(heldGauge)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)

	stopServing, err := serve(cfg, e, func() bool { return held.Load() > 0 }, errc)
	if err != nil {
		return err
	}
	defer stopServing()

	// done reports the end of the engines: when ctx ends, once every engine stopped and every
	// Lease was released.
	done := make(chan error, 1)
	if !cfg.LeaderElect {
		held.Store(1)
		go func() { done <- e.RunShard(ctx, shard.Whole, nil) }()
	} else {
		id := cmp.Or(cfg.Identity, NewIdentity())
		h := &shardHolder{kube: e.Kube(), log: log, namespace: cfg.LeaderElectionNamespace, name: cfg.LeaderElectionName,
			count: count, id: id, timings: cfg.Lease, run: e.RunShard, synced: e.ShardSynced, onHeld: func(n int) { held.Store(int32(n)) },
			moves: newMoves(count)}
		if err := e.Registry().Register(h.moves.counter); err != nil {
			return fmt.Errorf("registering the shard moves metric: %w", err)
		}
		defer e.Registry().Unregister(h.moves.counter)
		log.Info("holding shards", "shards", count, "namespace", cfg.LeaderElectionNamespace, "lease", cfg.LeaderElectionName, "identity", id)
		go func() { done <- holdShards(ctx, h) }()
	}
	select {
	case err := <-done:
		return err
	case err := <-errc:
		cancel()
		<-done
		return err
	}
}

// ShardsHeldMetric is the gauge of how many shards this replica holds, read from held; a
// replica registers it with the engine's metrics while it runs.
func ShardsHeldMetric(held func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "evalsi_shards_held", Help: "Shards this replica holds and reconciles."}, held)
}
