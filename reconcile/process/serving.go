package process

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"evals.si/operator/internal/pki"
)

// serve starts the process's endpoints that cfg turns on: /healthz and /readyz (ready once the
// engines of the shards it holds, when holds says it holds any, have synced), /metrics and Go's
// profiles. A server that fails later sends its error to errc; stop closes them all.
func serve(cfg Config, e Engine, holds func() bool, errc chan<- error) (stop func(), err error) {
	log := e.Log()
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// Ready means serving what it holds. A replica waiting for a shard is ready: it serves its
	// other endpoints. One that holds shards is ready once their caches have synced; after that a
	// shard it takes is reported while its caches sync, not failed, so that readiness does not
	// flap at every handover (a rollout waits on the first sync alone).
	var wasReady atomic.Bool
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := e.VersionRefusal(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		syncing := holds() && !e.Synced()
		if syncing && !wasReady.Load() {
			http.Error(w, "caches not synced", http.StatusServiceUnavailable)
			return
		}
		wasReady.Store(true)
		if syncing {
			fmt.Fprintln(w, "ok; taking a shard: its caches are syncing")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	metrics := http.NewServeMux()
	var metricsHandler http.Handler = promhttp.HandlerFor(e.Registry(), promhttp.HandlerOpts{})
	var metricsTLS *tls.Config
	if cfg.MetricsSecure {
		if cfg.MetricsClients == nil {
			metricsHandler = authorizeMetrics(e.Kube(), cfg.MetricsTokenAudience, metricsHandler)
		}
		if cfg.MetricsCertDir != "" {
			dir := &pki.Dir{Path: cfg.MetricsCertDir}
			if _, err := dir.GetCertificate(nil); err != nil {
				return nil, fmt.Errorf("the metrics certificate: %w", err)
			}
			metricsTLS = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: dir.GetCertificate}
		} else if metricsTLS, err = selfSignedTLS(); err != nil {
			return nil, fmt.Errorf("making the metrics certificate: %w", err)
		}
		metricsTLS = cfg.MetricsClients.Require(metricsTLS)
	}
	metrics.Handle("/metrics", metricsHandler)
	profiles := http.NewServeMux()
	profiles.HandleFunc("/debug/pprof/", pprof.Index)
	profiles.HandleFunc("/debug/pprof/profile", pprof.Profile)
	profiles.HandleFunc("/debug/pprof/trace", pprof.Trace)
	profiles.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	profiles.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	var servers []*http.Server
	stop = func() {
		for _, srv := range servers {
			srv.Close()
		}
	}
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
			stop()
			return nil, fmt.Errorf("listening for %s on %s: %w", s.name, s.addr, err)
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
		servers = append(servers, srv)
	}
	return stop, nil

}
