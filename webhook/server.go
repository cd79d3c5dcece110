package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/internal/pki"
	"evals.si/operator/internal/tenancy"
	"evals.si/operator/render"
)

// Config configures the webhook server.
type Config struct {
	// Listener is where admission is served (TLS); Health, when set, serves /healthz, /readyz and
	// /metrics.
	Listener, Health net.Listener
	// CertDir holds tls.crt and tls.key (cert-manager); used unless SelfSigned is set.
	CertDir    string
	SelfSigned *SelfSigned
	// CheckInterval is how often self-signed certificates are checked for renewal and the
	// configurations' caBundle for drift; a minute when zero.
	CheckInterval time.Duration
	// Kube, when set, lets validation read the Namespaces' project bindings (a watch of
	// namespaces), so that an object naming a project its namespace may not act in is refused,
	// and check what workload objects' pods would use against the writer's rights (Access).
	Kube kubernetes.Interface
	// AllowedTTL and DeniedTTL are how long Access keeps an allowed and a refused answer about a
	// reference (Answers); the defaults when zero.
	AllowedTTL, DeniedTTL time.Duration
	// Limits are the platform's limits of specs (MaxPoolReplicas).
	Limits render.Limits
	// DryRun, when set, dry-runs the children of workload objects at admission.
	DryRun *DryRun
	// Clients, when set, are the only callers the webhook answers: the API server, configured to
	// present a client certificate with an AdmissionConfiguration's kubeConfigFile. Nobody else
	// can ask it a question, so a forged review cannot learn what the webhook's
	// SubjectAccessReviews would tell.
	Clients *pki.Clients
	// MaxInFlight bounds the reviews served at once, and MaxConnections the connections
	// (shed.go); four and 32 per CPU when zero.
	MaxInFlight, MaxConnections int
	Log                         *slog.Logger
}

// DefaultKubeAPIQPS and DefaultKubeAPIBurst are the webhook's client-side limit of requests to
// the Kubernetes API: none. Its calls are made by reviews, which the webhook bounds itself (the
// connections it serves), and the API server's priority and fairness bounds them there; a
// token bucket of 200 a second made reviews naming two references wait for their
// SubjectAccessReviews, and past about 110 reviews a second the rest were answered 429.
const (
	DefaultKubeAPIQPS   = -1
	DefaultKubeAPIBurst = 400
)

// Paths of the two webhooks.
const (
	ValidatePath = "/validate"
	MutatePath   = "/mutate"
)

// Run serves admission until ctx ends. HTTP/2 is off (CVE-2023-44487 and a simpler server).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = time.Minute
	}
	var certs certSource
	if s := cfg.SelfSigned; s != nil {
		ss := &selfSignedCerts{cfg: *s}
		certs = ss
		go keepCertificates(ctx, ss, cfg.CheckInterval, cfg.Log)
	} else {
		if cfg.CertDir == "" {
			return errors.New("no certificates: give --cert-dir or --self-signed")
		}
		certs = &pki.Dir{Path: cfg.CertDir}
	}

	metrics := NewMetrics()
	metrics.Registry.MustRegister(pki.ServedExpiry{Name: "webhook-serving", Get: certs.GetCertificate})
	v := Validation{Limits: cfg.Limits, DryRun: cfg.DryRun}
	bindingsSynced := func() bool { return true }
	if cfg.Kube != nil {
		v.Namespaces = tenancy.WatchNamespaces(ctx, cfg.Kube, "")
		v.Access = &Access{Kube: cfg.Kube, Answers: NewAnswers(cfg.AllowedTTL, cfg.DeniedTTL, 0, metrics)}
		bindingsSynced = v.Namespaces.HasSynced
	}
	srv := &http.Server{
		Handler:           Admission(v, cfg.MaxInFlight, metrics),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         cfg.Clients.Require(&tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate}),
		// A non-nil, empty map turns HTTP/2 off.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.ServeTLS(limitConnections(cfg.Listener, cfg.MaxConnections), "", "") }()
	if cfg.Health != nil {
		health := http.NewServeMux()
		health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if _, err := certs.GetCertificate(nil); err != nil {
				http.Error(w, "no serving certificate", http.StatusServiceUnavailable)
				return
			}
			if !bindingsSynced() {
				http.Error(w, "namespaces not cached yet", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		health.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: health, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- hs.Serve(cfg.Health) }()
		defer hs.Close()
	}
	cfg.Log.Info("serving admission", "address", cfg.Listener.Addr().String())
	select {
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// Admission is the webhooks' handler: validation (v) and the creator's mutation, within one
// shedder's bounds of maxInFlight reviews at once (shed.go), counted in m.
func Admission(v Validation, maxInFlight int, m *Metrics) http.Handler {
	shed := newShedder(maxInFlight, m)
	mux := http.NewServeMux()
	mux.Handle(ValidatePath, shed.wrap(handler(Validator(v))))
	mux.Handle(MutatePath, shed.wrap(handler(Mutate)))
	return mux
}

// keepCertificates syncs self-signed certificates until ctx ends: every interval once a sync
// succeeds, and sooner after a failure (one second, doubling up to interval). Helm creates the
// webhook configurations after the Deployment, so a new pod often starts before the
// configuration whose caBundle it sets exists: it stays unready (no serving certificate) and
// tries again, instead of exiting into the kubelet's crash-loop back-off.
func keepCertificates(ctx context.Context, ss *selfSignedCerts, interval time.Duration, log *slog.Logger) {
	backoff := min(time.Second, interval)
	for {
		next := interval
		if err := ss.sync(ctx); ctx.Err() != nil {
			return // shutting down: the failed call is not news
		} else if err != nil {
			log.Error("syncing the self-signed certificates", "err", err, "retry", backoff)
			next, backoff = backoff, min(2*backoff, interval)
		} else {
			backoff = min(time.Second, interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}
