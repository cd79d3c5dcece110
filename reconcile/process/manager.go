// Package process is what the operator's process serves around its engine: /healthz and /readyz,
// /metrics (over HTTPS with TokenReview and SubjectAccessReview when secured), Go's profiles, and
// leader election on a Lease, so that one replica reconciles while the others wait.
package process

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"evals.si/operator/internal/pki"
)

// Engine is what the process runs: the reconciling engine.
type Engine interface {
	// Run reconciles until ctx ends.
	Run(ctx context.Context) error
	// Synced reports whether the caches have synced; VersionRefusal why the engine does not
	// reconcile on this cluster ("" when it does).
	Synced() bool
	VersionRefusal() string
	// Kube is a client for leader election and token reviews; Registry holds the metrics.
	Kube() kubernetes.Interface
	Registry() *prometheus.Registry
	Log() *slog.Logger
}

// Config configures the process: leader election and the HTTP endpoints.
type Config struct {
	// LeaderElect runs the engine only while holding the Lease LeaderElectionNamespace/
	// LeaderElectionName.
	LeaderElect             bool
	LeaderElectionNamespace string
	LeaderElectionName      string
	// HealthAddr serves /healthz and /readyz; MetricsAddr serves /metrics. Empty or "0" is off.
	HealthAddr  string
	MetricsAddr string
	// PprofAddr serves Go's profiles under /debug/pprof/, for profiling the operator under load;
	// empty or "0" (the default) is off. Bind it to loopback: profiles are not authenticated.
	PprofAddr string
	// MetricsSecure serves /metrics over HTTPS to tokens allowed to get /metrics.
	MetricsSecure bool
	// MetricsCertDir holds the metrics endpoint's tls.crt and tls.key (a Secret whose CA the
	// scraper verifies), read again when they change; empty: a certificate made at start, which
	// no scraper can verify.
	MetricsCertDir string
}

// Run serves health and metrics, waits for leadership if asked, and runs e until ctx ends.
// Losing leadership is an error: the process should exit and start over.
func Run(ctx context.Context, cfg Config, e Engine) error {
	var err error
	log := e.Log()
	var leading atomic.Bool
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)

	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		// A replica waiting for leadership is ready: it serves its other endpoints.
		if why := e.VersionRefusal(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		if leading.Load() && !e.Synced() {
			http.Error(w, "caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	metrics := http.NewServeMux()
	var metricsHandler http.Handler = promhttp.HandlerFor(e.Registry(), promhttp.HandlerOpts{})
	var metricsTLS *tls.Config
	if cfg.MetricsSecure {
		metricsHandler = authorizeMetrics(e.Kube(), metricsHandler)
		if cfg.MetricsCertDir != "" {
			dir := &pki.Dir{Path: cfg.MetricsCertDir}
			if _, err := dir.GetCertificate(nil); err != nil {
				return fmt.Errorf("the metrics certificate: %w", err)
			}
			metricsTLS = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: dir.GetCertificate}
		} else if metricsTLS, err = selfSignedTLS(); err != nil {
			return fmt.Errorf("making the metrics certificate: %w", err)
		}
	}
	metrics.Handle("/metrics", metricsHandler)
	profiles := http.NewServeMux()
	profiles.HandleFunc("/debug/pprof/", pprof.Index)
	profiles.HandleFunc("/debug/pprof/profile", pprof.Profile)
	profiles.HandleFunc("/debug/pprof/trace", pprof.Trace)
	profiles.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	profiles.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	for _, s := range []struct {
		name, addr string
		h          http.Handler
		tls        *tls.Config
	}{{"health", cfg.HealthAddr, health, nil}, {"metrics", cfg.MetricsAddr, metrics, metricsTLS}, {"pprof", cfg.PprofAddr, profiles, nil}} {
		if s.addr == "" || s.addr == "0" {
			continue
		}
		l, err := net.Listen("tcp", s.addr)
		if err != nil {
			return fmt.Errorf("listening for %s on %s: %w", s.name, s.addr, err)
		}
		log.Info("serving", "endpoint", s.name, "address", l.Addr().String(), "tls", s.tls != nil)
		if s.tls != nil {
			l = tls.NewListener(l, s.tls)
		}
		srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s server: %w", s.name, err)
			}
		}()
		defer srv.Close()
	}

	run := func(ctx context.Context) {
		leading.Store(true)
		errc <- e.Run(ctx)
	}
	if !cfg.LeaderElect {
		go run(ctx)
	} else {
		id, _ := os.Hostname()
		id += "_" + string(uuid.NewUUID())
		lock, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.LeaderElectionNamespace, cfg.LeaderElectionName,
			e.Kube().CoreV1(), e.Kube().CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
		if err != nil {
			return fmt.Errorf("creating the leader election lock: %w", err)
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   15 * time.Second,
			RenewDeadline:   10 * time.Second,
			RetryPeriod:     2 * time.Second,
			ReleaseOnCancel: true,
			Name:            cfg.LeaderElectionName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: run,
				OnStoppedLeading: func() {
					if ctx.Err() == nil {
						errc <- errors.New("lost leadership")
					}
				},
				OnNewLeader: func(identity string) { log.Info("leader", "identity", identity) },
			},
		})
		if err != nil {
			return fmt.Errorf("configuring leader election: %w", err)
		}
		log.Info("waiting for leadership", "lease", cfg.LeaderElectionNamespace+"/"+cfg.LeaderElectionName, "identity", id)
		go le.Run(ctx)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}
