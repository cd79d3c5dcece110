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
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
			&cli.BoolFlag{Name: "cluster", Usage: "read the namespaces' project bindings and the SandboxClasses from the cluster, to authorize callers by project (implied by --kubernetes-audience); without it a namespace acts in the project named like it"},
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "serve the callers of this namespace only, reading only its Namespace (an evalsid for one team, with no cluster-wide read)"},
			&cli.StringSliceFlag{Name: "operator-namespace", Usage: "a namespace where an evalsi-operator runs: its evalsi-operator service account creates runs, writes policies and forwards creators in its project (repeatable; --namespace is one). An account of that name in any other namespace, which a namespace editor can make, may only read runs, as a pool"},
			&cli.StringSliceFlag{Name: "platform-identity", Usage: "an identity that acts in every project, as a cluster-wide operator (repeatable)"},
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
			if c.String("tls-cert-file") == "" {
				if len(c.StringSlice("client-ca-file")) > 0 {
					return cli.Exit("evalsid: --client-ca-file needs --tls-cert-file", command.ExitUsage)
				}
				fmt.Fprintf(c.App.ErrWriter, "evalsid serving on %s%s\n", l.Addr(), simulatedNotice)
				return srv.Serve(c.Context, l)
			}
			cfg, err := serverTLS(c.String("tls-cert-file"), c.String("tls-key-file"), c.StringSlice("client-ca-file"))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "evalsid serving HTTPS on %s (client certificates required: %v)%s\n", l.Addr(), cfg.ClientCAs != nil, simulatedNotice)
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

// serverTLS loads evalsid's serving certificate and, when caFiles are given, the CAs that client
// certificates must chain to (the platform's CA of the operator's certificate, the workload
// signer's ClusterTrustBundle that pools' certificates chain to). Each is read again on each
// handshake, so that a renewed certificate or a rotated CA bundle (cert-manager's Secret, a
// projection the kubelet updates) is in force without a restart.
func serverTLS(certFile, keyFile string, caFiles []string) (*tls.Config, error) {
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
	if len(caFiles) == 0 {
		return cfg, nil
	}
	pool, err := clientCAs(caFiles)
	if err != nil {
		return nil, err
	}
	cfg.ClientCAs = pool
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := clientCAs(caFiles)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		c.GetConfigForClient, c.ClientCAs = nil, pool
		return c, nil
	}
	return cfg, nil
}

// clientCAs reads the CA bundles files into one pool; each must hold a certificate.
func clientCAs(files []string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading the client CA: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", f)
		}
	}
	return pool, nil
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
