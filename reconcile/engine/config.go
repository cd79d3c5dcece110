package engine

import (
	"log/slog"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"evals.si/operator/reconcile/engine/cached"
	"evals.si/operator/shard"
)

// Config configures an engine.
type Config struct {
	// Rest is the client configuration; the engine wraps its transport to count requests, and
	// its QPS and Burst are each resource's budget (limitPerResource).
	Rest *rest.Config
	// Namespace restricts every informer to one namespace; empty watches all.
	Namespace string
	// Kinds are every kind the engine can run; Controllers selects among them by name (empty
	// runs all).
	Kinds       []*Kind
	Controllers []string
	// Workers is the number of concurrent reconciles per controller (32 when 0).
	Workers int
	// Resync is how often every object is reconciled again without an event.
	Resync time.Duration
	// DiscoveryInterval is how often the engine looks for resources (its kinds', their
	// children's) that appeared or went away.
	DiscoveryInterval time.Duration
	// ReconcileTimeout bounds one reconcile.
	ReconcileTimeout time.Duration
	// Tenancy decides the project each namespaced object acts in; nil: every object acts in the
	// project named like its namespace.
	Tenancy Tenancy
	// Shard is the slice of the objects the engine reconciles (shard.Whole when zero): it caches
	// only that slice's owners and children, except for the owners of Shared kinds.
	Shard shard.Shard
	// Metrics, when set, are the metrics the engine records into (the engines of one process's
	// shards share them); else the engine makes its own.
	Metrics *Metrics
	// Writable, when set, holds the engine's writes until it is closed: before, the engine
	// discovers, watches and reconciles, and sends no write (CheckTenure); an object whose
	// reconcile would write waits, and is reconciled again once it is closed. A replica warms a
	// shard this way while the Lease of a holder that stopped renewing it runs out: when it
	// takes the Lease, it has already read every object of the shard and found which need a
	// write.
	Writable <-chan struct{}
	// Log is the engine's logger.
	Log *slog.Logger
	// AllowUnsupportedMinor reconciles on a Kubernetes minor other than evalsi.KubernetesMinor
	// (with a warning); by default the engine refuses to.
	AllowUnsupportedMinor bool
	// Clock is the time of status transitions (clock.RealClock when nil).
	Clock clock.PassiveClock
	// Discovery, when set, is the process's (shared by the engines of its shards); else the
	// engine makes its own, which keeps answers for half a DiscoveryInterval.
	Discovery *cached.Discovery
	// RequestLabel is the shard label of the engine's requests to the API server; "" is its
	// shard's.
	RequestLabel string
	// Events, when set, is the process's (shared by the engines of its shards, each writing its
	// own shard's Events); else the engine starts its own broadcasters.
	Events *Events
}
