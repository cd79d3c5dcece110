// Package process is what the operator's process serves around its engine: /healthz and /readyz,
// /metrics (over HTTPS with TokenReview and SubjectAccessReview when secured), Go's profiles, and
// shards held on Leases (shards.go), so that each object is reconciled by one replica at a time,
// the shards spread over the replicas that are alive.
package process

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/internal/pki"
	"evals.si/operator/shard"
)

// Engine is what the process runs: the reconciling engine, one per held shard.
type Engine interface {
	// RunShard reconciles the objects of s until ctx ends; with writable set, it reads them
	// from the start and writes only once writable is closed.
	RunShard(ctx context.Context, s shard.Shard, writable <-chan struct{}) error
	// Synced reports whether the caches of every running shard have synced, ShardSynced those
	// of s's engine; VersionRefusal why the engine does not reconcile on this cluster ("" when it
	// does).
	Synced() bool
	ShardSynced(s shard.Shard) bool
	VersionRefusal() string
	// Kube is a client for leader election and token reviews; Registry holds the metrics.
	Kube() kubernetes.Interface
	Registry() *prometheus.Registry
	Log() *slog.Logger
}

// Config configures the process: leader election, shards and the HTTP endpoints.
type Config struct {
	// LeaderElect runs each shard's engine only while holding its Lease, in namespace
	// LeaderElectionNamespace: LeaderElectionName when there is one shard, else
	// LeaderElectionName-shard-N (ShardLease).
	LeaderElect             bool
	LeaderElectionNamespace string
	LeaderElectionName      string
	// Identity names this replica in the Leases it holds (NewIdentity when empty).
	Identity string
	// Lease are the timings of every Lease (DefaultLeaseTimings when zero).
	Lease LeaseTimings
	// Shards is how many shards the objects are split into (1 when 0); each replica holds its
	// fair share of them.
	Shards int
	// HealthAddr serves /healthz and /readyz; MetricsAddr serves /metrics. Empty or "0" is off.
	HealthAddr  string
	MetricsAddr string
	// PprofAddr serves Go's profiles under /debug/pprof/, for profiling the operator under load;
	// empty or "0" (the default) is off. Bind it to loopback: profiles are not authenticated.
	PprofAddr string
	// MetricsSecure serves /metrics over HTTPS to tokens allowed to get /metrics, or, with
	// MetricsClients, to the scrapers' client certificates alone: then a scraper sends no bearer
	// token, and an endpoint that is not the operator's (a pod serving a certificate read from
	// the team's Secret) collects no credential.
	MetricsSecure  bool
	MetricsClients *pki.Clients
	// MetricsTokenAudience, when set, is the audience a scraper's token must be issued for (the
	// TokenReview asks for it): a token meant for the API server or evalsid is refused.
	MetricsTokenAudience string
	// MetricsCertDir holds the metrics endpoint's tls.crt and tls.key (a Secret whose CA the
	// scraper verifies), read again when they change; empty: a certificate made at start, which
	// no scraper can verify.
	MetricsCertDir string
}

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
