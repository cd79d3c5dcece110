package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
	"evals.si/operator/internal/command"
)

func evalsidCommand() *cli.Command {
	return &cli.Command{
		Name:  "evalsid",
		Usage: "serve the reference in-memory evalsid (RunService, MonitorService and QueueService over Connect); it runs no evaluator: every run's result is simulated, and marked so",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8090", Usage: "address to serve on"},
			&cli.StringFlag{Name: "metrics-bind-address", Usage: "serve Prometheus metrics (evalsid_runs by project) on this address, without authentication (off when empty)"},
			&cli.StringFlag{Name: "tokens", Usage: "file of accepted bearer tokens, one \"TOKEN IDENTITY\" per line"},
			&cli.StringFlag{Name: "kubernetes-audience", Usage: "accept the cluster's service-account tokens for this audience (the kubernetes: provider), verified with the API server's issuer discovery, while the service account and the pod each names still exist (read with get on serviceaccounts and pods, each answer kept 30s)"},
			command.KubeconfigFlag("of the cluster whose tokens are accepted"), command.ContextFlag(),
			&cli.StringFlag{Name: "tls-cert-file", Usage: "serve HTTPS with this certificate"},
			&cli.StringFlag{Name: "tls-key-file", Usage: "key of --tls-cert-file"},
			&cli.StringSliceFlag{Name: "client-ca-file", Usage: "require client certificates that these CA bundles verify, whose common name is the identity of the token beside them (mutual TLS; needs --tls-cert-file; repeatable, read again at each handshake)"},
			&cli.StringSliceFlag{Name: "client-ca-signer", Usage: "require client certificates that the ClusterTrustBundles of this signer verify, such as " + evalsi.WorkloadSigner + " (pools' certificates), watched from the cluster (repeatable; needs --tls-cert-file)"},
			&cli.BoolFlag{Name: "cluster", Usage: "read the namespaces' project bindings and the SandboxClasses from the cluster, to authorize callers by project (implied by --kubernetes-audience); without it a namespace acts in the project named like it"},
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "serve the callers of this namespace only, reading only its Namespace (an evalsid for one team, with no cluster-wide read)"},
			&cli.StringSliceFlag{Name: "operator-namespace", Usage: "a namespace where an evalsi-operator runs: its evalsi-operator service account creates runs, writes policies and forwards creators in its project (repeatable; --namespace is one). An account of that name in any other namespace, which a namespace editor can make, may only read runs, as a pool"},
			&cli.StringSliceFlag{Name: "platform-identity", Usage: "an identity that acts in every project, as a cluster-wide operator (repeatable)"},
			&cli.StringSliceFlag{Name: "queue-reader-identity", Usage: "an identity that reads the queue depth of every pool and nothing else, such as KEDA's system:serviceaccount:keda:evalsi-queue-reader (repeatable)"},
			&cli.StringFlag{Name: "sandbox-namespace", Value: "evalsi-sandbox", Usage: "the namespace of the SandboxClass pools, whose queue reader may read their queues"},
			&cli.DurationFlag{Name: "pending", Value: evalsid.DefaultSchedule.Pending, Usage: "how long runs stay Pending"},
			&cli.DurationFlag{Name: "running", Value: evalsid.DefaultSchedule.Running, Usage: "how long runs stay Running"},
		},
		Action: func(c *cli.Context) error {
			if c.String("tokens") == "" && c.String("kubernetes-audience") == "" {
				return cli.Exit("evalsid: give --tokens, --kubernetes-audience or both, or no call is accepted", command.ExitUsage)
			}
			tokens := map[string]string{}
			if path := c.String("tokens"); path != "" {
				var err error
				if tokens, err = readTokens(path); err != nil {
					return err
				}
			}
			schedule := evalsid.DefaultSchedule
			schedule.Pending, schedule.Running = c.Duration("pending"), c.Duration("running")
			l, err := net.Listen("tcp", c.String("listen"))
			if err != nil {
				return err
			}
			srv := evalsid.New(tokens, schedule)
			for _, id := range c.StringSlice("platform-identity") {
				srv.TrustPlatform(id)
			}
			for _, id := range c.StringSlice("queue-reader-identity") {
				srv.TrustQueueReader(id)
			}
			operators := c.StringSlice("operator-namespace")
			if ns := c.String("namespace"); ns != "" {
				operators = append(operators, ns)
			}
			srv.SetOperatorNamespaces(operators...)
			srv.SetSandboxNamespace(c.String("sandbox-namespace"))
			if addr := c.String("metrics-bind-address"); addr != "" {
				if err := serveMetrics(c.Context, addr, srv.Collector()); err != nil {
					return err
				}
			}
			aud := c.String("kubernetes-audience")
			if aud != "" || c.Bool("cluster") {
				rc, err := command.KubeConfig(c)
				if err != nil {
					return err
				}
				dir, err := evalsid.WatchCluster(c.Context, rc, c.String("namespace"))
				if err != nil {
					return err
				}
				srv.SetDirectory(dir)
				if aud != "" {
					hc, err := rest.HTTPClientFor(rc)
					if err != nil {
						return fmt.Errorf("a client of the API server: %w", err)
					}
					kube, err := kubernetes.NewForConfig(rc)
					if err != nil {
						return fmt.Errorf("a client of the API server: %w", err)
					}
					srv.TrustKubernetes(&evalsid.KubernetesIssuer{APIServer: rc.Host, Client: hc, Audience: aud,
						Bound: evalsid.NewLiveObjects(kube, evalsid.BoundObjectsTTL)})
				}
			}
			trust := clientTrust{files: c.StringSlice("client-ca-file"), signers: c.StringSlice("client-ca-signer")}
			if c.String("tls-cert-file") == "" {
				if trust.required() {
					return cli.Exit("evalsid: --client-ca-file and --client-ca-signer need --tls-cert-file", command.ExitUsage)
				}
				fmt.Fprintf(c.App.ErrWriter, "evalsid serving on %s%s\n", l.Addr(), simulatedNotice)
				return srv.Serve(c.Context, l)
			}
			if len(trust.signers) > 0 {
				rc, err := command.KubeConfig(c)
				if err != nil {
					return err
				}
				if err := trust.watchTrustBundles(c.Context, rc); err != nil {
					return err
				}
			}
			cfg, err := serverTLS(c.String("tls-cert-file"), c.String("tls-key-file"), trust)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "evalsid serving HTTPS on %s (client certificates required: %v)%s\n", l.Addr(), trust.required(), simulatedNotice)
			return srv.ServeTLS(c.Context, l, cfg)
		},
	}
}

// simulatedNotice ends evalsid's first line: the reference server is for trials and tests.
const simulatedNotice = "; it runs no evaluator: every run's result is SIMULATED (made up, marked so in its status)"

// readTokens reads "TOKEN IDENTITY" lines; blank lines and # comments are skipped.
func readTokens(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tokens := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"TOKEN IDENTITY\"", path, n)
		}
		tokens[fields[0]] = fields[1]
	}
	return tokens, sc.Err()
}

// clientTrust is what verifies evalsid's callers' certificates: CA bundle files, and the
// ClusterTrustBundles of signers (the workload signer's, which pools' certificates chain to), each
// read again at each handshake so that a rotation is in force without a restart.
type clientTrust struct {
	files   []string
	signers []string
	bundles cache.Store
}

// required reports whether callers must present a certificate.
func (t clientTrust) required() bool { return len(t.files) > 0 || len(t.signers) > 0 }

// pool returns the CAs in force now. Files must each hold a certificate; a signer may have
// published none yet, and then verifies no one.
func (t clientTrust) pool() (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, f := range t.files {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading the client CA: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", f)
		}
	}
	if t.bundles != nil {
		for _, obj := range t.bundles.List() {
			if b := obj.(*certificatesv1.ClusterTrustBundle); slices.Contains(t.signers, b.Spec.SignerName) {
				pool.AppendCertsFromPEM([]byte(b.Spec.TrustBundle))
			}
		}
	}
	return pool, nil
}

// watchTrustBundles keeps t.bundles to the cluster's ClusterTrustBundles until ctx ends.
func (t *clientTrust) watchTrustBundles(ctx context.Context, rc *rest.Config) error {
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(kube, 0)
	informer := factory.Certificates().V1().ClusterTrustBundles().Informer()
	t.bundles = informer.GetStore()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("listing ClusterTrustBundles: %w", ctx.Err())
	}
	return nil
}

// serverTLS loads evalsid's serving certificate and, when trust requires client certificates,
// the CAs they must chain to (the platform's CA of the operator's certificate, the workload
// signer's bundle). Each is read again on each handshake, so that a renewed certificate or a
// rotated CA (cert-manager's Secret, a projection the kubelet updates, a ClusterTrustBundle the
// signer updates) is in force without a restart.
func serverTLS(certFile, keyFile string, trust clientTrust) (*tls.Config, error) {
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			return &cert, err
		},
	}
	if !trust.required() {
		return cfg, nil
	}
	pool, err := trust.pool()
	if err != nil {
		return nil, err
	}
	cfg.ClientCAs = pool
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := trust.pool()
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		c.GetConfigForClient, c.ClientCAs = nil, pool
		return c, nil
	}
	return cfg, nil
}

// serveMetrics serves the collector's metrics on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, collector prometheus.Collector) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serving metrics: %w", err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go srv.Serve(l)
	return nil
}
