package process

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
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
