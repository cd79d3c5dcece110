package reconcile

import (
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"evals.si/operator/apiclient"
	"evals.si/operator/render"
)

// Config configures an engine.
type Config struct {
	// Rest is the client configuration; the engine wraps its transport to count requests, and
	// its QPS and Burst are each resource's budget (limitPerResource).
	Rest *rest.Config
	// Namespace restricts every informer to one namespace; empty watches all.
	Namespace string
	// Controllers are the controller names to run; empty runs all.
	Controllers []string
	// Workers is the number of concurrent reconciles per controller (32 when 0).
	Workers int
	// Resync is how often every object is reconciled again without an event.
	Resync time.Duration
	// DiscoveryInterval is how often the engine looks for CRDs (its own, KEDA's) that appeared
	// or went away.
	DiscoveryInterval time.Duration
	// ReconcileTimeout bounds one reconcile.
	ReconcileTimeout time.Duration
	// Render are the rendering options; Autoscaling is set by the engine from discovery.
	Render render.Options
	// API configures the evalsid client of the EvalRun, OnlineEvalPolicy and TraceSource
	// controllers; without a URL they stay off.
	API apiclient.Options
	// RunPollInterval is how often a running EvalRun's run is read (with jitter).
	RunPollInterval time.Duration
	// Log is the engine's logger.
	Log *slog.Logger
	// AllowUnsupportedMinor reconciles on a Kubernetes minor other than evalsi.KubernetesMinor
	// (with a warning); by default the engine refuses to.
	AllowUnsupportedMinor bool
}
