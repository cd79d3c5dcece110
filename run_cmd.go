package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"evals.si/operator/apiclient"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/command"
	"evals.si/operator/internal/pki"
	"evals.si/operator/reconcile"
	"evals.si/operator/reconcile/process"
)

func runCommand() *cli.Command {
	flags := []cli.Flag{
		command.KubeconfigFlag(""), command.ContextFlag(),
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "watch and write only this namespace (default: all)"},
		&cli.StringSliceFlag{Name: "controllers", Usage: "controllers to run (default: all): " + strings.Join(reconcile.ControllerNames(), ", ")},
		&cli.IntFlag{Name: "workers", Value: 32, Usage: "concurrent reconciles per controller (they mostly wait on the API server; the rate limits bound the requests)"},
		&cli.DurationFlag{Name: "resync", Value: 10 * time.Minute, Usage: "how often every object is reconciled without an event"},
		&cli.DurationFlag{Name: "discovery-interval", Value: 30 * time.Second, Usage: "how often to look for CRDs (evalsi's, KEDA's) that appeared or went away"},
		&cli.BoolFlag{Name: "leader-elect", Value: true, Usage: "run only while holding the leader Lease"},
		&cli.StringFlag{Name: "leader-election-namespace", EnvVars: []string{"POD_NAMESPACE"}, Usage: "namespace of the leader Lease (default: --namespace, else default)"},
		&cli.StringFlag{Name: "leader-election-id", Value: evalsi.LeaderElectionID, Usage: "name of the leader Lease (with --shards above 1: the prefix of the shards' and replicas' Leases)"},
		&cli.DurationFlag{Name: "leader-elect-lease-duration", Value: process.DefaultLeaseTimings.LeaseDuration, Usage: "how long after a Lease's last renewal another replica may take it: the longest a killed replica's shards wait (whole seconds)"},
		&cli.DurationFlag{Name: "shard-lease-duration", Usage: "how long after a shard's Lease's last renewal another replica may take it (whole seconds, longer than --leader-elect-renew-deadline; the lease duration when unset): shorter, a killed replica's shards are taken sooner, and a holder whose renewals the API server is slow to answer gives its shards up sooner"},
		&cli.DurationFlag{Name: "leader-elect-renew-deadline", Value: process.DefaultLeaseTimings.RenewDeadline, Usage: "how long a replica tries to renew a Lease before it stops that shard's writes (shorter than the lease duration)"},
		&cli.DurationFlag{Name: "leader-elect-retry-period", Value: process.DefaultLeaseTimings.RetryPeriod, Usage: "how often a replica renews its Leases and reads the others'"},
		&cli.IntFlag{Name: "shards", Value: 1, Usage: "split the objects into this many shards (by owner UID, at most 64), each reconciled by one replica at a time; replicas share them evenly and take over those of a replica that stops; every replica must be given the same number"},
		&cli.StringFlag{Name: "metrics-bind-address", Value: ":8080", Usage: "address of /metrics (0 disables)"},
		&cli.BoolFlag{Name: "metrics-secure", Usage: "serve /metrics over HTTPS to bearer tokens allowed to get /metrics (TokenReview and SubjectAccessReview)"},
		&cli.StringFlag{Name: "metrics-client-ca-file", Usage: "with --metrics-secure, serve /metrics only to scrapers presenting a client certificate this CA bundle verifies, and ask them for no token (a scraper sends its credential to no one)"},
		&cli.StringSliceFlag{Name: "metrics-client-name", Usage: "with --metrics-client-ca-file, the common names a scraper's certificate may carry (repeatable; required: with none, no scraper is answered)"},
		&cli.StringFlag{Name: "metrics-token-audience", Usage: "with --metrics-secure and no client CA, the audience a scraper's token must be issued for (default: the API server's own)"},
		&cli.StringFlag{Name: "metrics-cert-dir", Usage: "with --metrics-secure, serve the tls.crt and tls.key of this directory (read again when they change), whose CA scrapers verify; default: a certificate made at start"},
		&cli.StringFlag{Name: "pprof-bind-address", Value: "0", Usage: "address of Go's profiles, /debug/pprof/ (0 disables; bind to loopback, they are not authenticated)"},
		&cli.StringFlag{Name: "health-probe-bind-address", Value: ":8081", Usage: "address of /healthz and /readyz (0 disables)"},
		&cli.Float64Flag{Name: "kube-api-qps", Value: 200, Usage: "steady requests per second to the Kubernetes API, per resource (Deployments, Evaluators' statuses, Events, ...); -1: no client-side limit"},
		&cli.IntFlag{Name: "kube-api-burst", Value: 400, Usage: "burst of requests to the Kubernetes API, per resource"},
		&cli.BoolFlag{Name: "kube-api-compression", Usage: "ask the API server to gzip its responses and watch streams (off: inside the cluster, gzip costs the API server and the operator CPU and saves no time; on across a slow link)"},
		&cli.StringFlag{Name: "api-token-file", Value: "/var/run/secrets/evals.si/token", Usage: "bearer token for evalsid, read again when it changes (a projected service-account token)"},
		&cli.StringFlag{Name: "api-ca-file", Usage: "CA bundle that verifies evalsid (https)"},
		&cli.StringFlag{Name: "api-client-cert", Usage: "client certificate for mutual TLS to evalsid"},
		&cli.StringFlag{Name: "api-client-key", Usage: "key of --api-client-cert"},
		&cli.DurationFlag{Name: "api-timeout", Value: 10 * time.Second, Usage: "deadline of each call to evalsid"},
		&cli.BoolFlag{Name: "require-supported-minor", Value: true, Usage: "refuse to reconcile on a Kubernetes minor other than " + evalsi.KubernetesMinor + " (false: reconcile anyway, with a warning; unsupported)"},
		&cli.DurationFlag{Name: "run-poll-interval", Value: 10 * time.Second, Usage: "how often a running EvalRun's run is read (with ±20% jitter)"},
		&cli.DurationFlag{Name: "evalrun-ttl", Usage: "how long a finished EvalRun stays before it is deleted (its run and results stay on evalsid); an EvalRun's evals.si/ttl-after-finished annotation overrides it; 0 keeps them"},
	}
	return &cli.Command{
		Name:  "run",
		Usage: "run the operator's controllers",
		Flags: append(append(flags, command.RenderFlags...), command.LogFlags...),
		Action: func(c *cli.Context) error {
			log, err := command.NewLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			opts, err := command.RenderOptions(c)
			if err != nil {
				return err
			}
			var metricsClients *pki.Clients
			if path := c.String("metrics-client-ca-file"); path != "" {
				if metricsClients, err = pki.ReadClients(path, c.StringSlice("metrics-client-name")); err != nil {
					return cli.Exit(fmt.Sprintf("--metrics-client-ca-file: %v", err), command.ExitUsage)
				}
			}
			rc, err := command.KubeConfig(c)
			if err != nil {
				return err
			}
			rc.QPS, rc.Burst = float32(c.Float64("kube-api-qps")), c.Int("kube-api-burst")
			rc.DisableCompression = !c.Bool("kube-api-compression")
			// The user agent names the replica, so that the API server's audit log says which one
			// wrote (its Leases' holder identity).
			identity := process.NewIdentity()
			rc.UserAgent = "evalsi-operator/" + version + " (" + identity + ")"
			leNamespace := c.String("leader-election-namespace")
			if leNamespace == "" {
				leNamespace = c.String("namespace")
			}
			if leNamespace == "" {
				leNamespace = "default"
			}
			return reconcile.RunManager(c.Context, reconcile.ManagerConfig{
				Engine: reconcile.Config{
					Rest:              rc,
					Namespace:         c.String("namespace"),
					Controllers:       c.StringSlice("controllers"),
					Workers:           c.Int("workers"),
					Resync:            c.Duration("resync"),
					DiscoveryInterval: c.Duration("discovery-interval"),
					Render:            opts,
					API: apiclient.Options{
						URL:         c.String("api-url"),
						TokenFile:   c.String("api-token-file"),
						CAFile:      c.String("api-ca-file"),
						ClientCert:  c.String("api-client-cert"),
						ClientKey:   c.String("api-client-key"),
						CallTimeout: c.Duration("api-timeout"),
					},
					RunPollInterval:       c.Duration("run-poll-interval"),
					EvalRunTTL:            c.Duration("evalrun-ttl"),
					AllowUnsupportedMinor: !c.Bool("require-supported-minor"),
					Log:                   log,
				},
				Config: process.Config{
					LeaderElect:             c.Bool("leader-elect"),
					LeaderElectionNamespace: leNamespace,
					LeaderElectionName:      c.String("leader-election-id"),
					Shards:                  c.Int("shards"),
					Identity:                identity,
					Lease:                   leaseTimings(c),
					HealthAddr:              c.String("health-probe-bind-address"),
					MetricsAddr:             c.String("metrics-bind-address"),
					PprofAddr:               c.String("pprof-bind-address"),
					MetricsSecure:           c.Bool("metrics-secure"),
					MetricsCertDir:          c.String("metrics-cert-dir"),
					MetricsClients:          metricsClients,
					MetricsTokenAudience:    c.String("metrics-token-audience"),
				},
			})
		},
	}
}

// leaseTimings are the timings of the Leases that --leader-elect-* set.
func leaseTimings(c *cli.Context) process.LeaseTimings {
	return process.LeaseTimings{
		LeaseDuration:      c.Duration("leader-elect-lease-duration"),
		RenewDeadline:      c.Duration("leader-elect-renew-deadline"),
		RetryPeriod:        c.Duration("leader-elect-retry-period"),
		ShardLeaseDuration: c.Duration("shard-lease-duration"),
	}
}
