package main

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/internal/command"
	"evals.si/operator/internal/pki"
	"evals.si/operator/webhook"
)

func webhookCommand() *cli.Command {
	return &cli.Command{
		Name:  "webhook",
		Usage: "serve the validating and mutating admission webhooks of the evals.si kinds",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Value: ":9443", Usage: "address of the webhooks (TLS)"},
			&cli.StringFlag{Name: "health-probe-bind-address", Value: ":8081", Usage: "address of /healthz and /readyz (0 disables)"},
			&cli.StringFlag{Name: "cert-dir", Usage: "directory with tls.crt and tls.key (cert-manager or a Secret), read again when they change"},
			&cli.BoolFlag{Name: "self-signed", Usage: "make and rotate a CA and serving certificate, kept in --secret-name, and patch the caBundle of the webhook configurations"},
			command.KubeconfigFlag("to read Namespaces' project bindings and, with --self-signed, to keep certificates"), command.ContextFlag(),
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, EnvVars: []string{"POD_NAMESPACE"}, Value: "evalsi-system", Usage: "namespace of the Secret and the Service"},
			&cli.StringFlag{Name: "secret-name", Value: "evalsi-webhook-certs", Usage: "Secret that holds the self-signed certificates"},
			&cli.StringFlag{Name: "service-name", Value: "evalsi-webhook", Usage: "Service in front of the webhook (the certificate's names)"},
			&cli.StringSliceFlag{Name: "host", Usage: "extra DNS name or IP address of the serving certificate"},
			&cli.StringFlag{Name: "validating-config", Value: "evalsi-validation", Usage: "ValidatingWebhookConfiguration whose caBundle is kept current"},
			&cli.StringFlag{Name: "mutating-config", Value: "evalsi-creator", Usage: "MutatingWebhookConfiguration whose caBundle is kept current"},
			&cli.DurationFlag{Name: "cert-validity", Value: 365 * 24 * time.Hour, Usage: "lifetime of the self-signed serving certificate; renewed with a third left"},
			&cli.DurationFlag{Name: "check-interval", Value: time.Minute, Usage: "how often the self-signed certificates are checked for renewal and the configurations' caBundle for drift (someone else resetting it)"},
			&cli.BoolFlag{Name: "dry-run-children", Usage: "dry-run the children of Evaluators, SandboxClasses and CheckpointServers at admission (rendered with the render flags), refusing what the API server would refuse"},
			&cli.DurationFlag{Name: "dry-run-timeout", Value: 2 * time.Second, Usage: "bound of the dry runs of one request; past it the object is admitted with a warning"},
			&cli.Float64Flag{Name: "kube-api-qps", Value: webhook.DefaultKubeAPIQPS, Usage: "steady requests per second to the Kubernetes API (-1: no client-side limit: the calls are bounded by the reviews served at once and the connections, and the API server's priority and fairness bounds them; dry runs are two or three per admitted workload object, access checks one per reference not yet known)"},
			&cli.IntFlag{Name: "kube-api-burst", Value: webhook.DefaultKubeAPIBurst, Usage: "burst of requests to the Kubernetes API"},
			&cli.DurationFlag{Name: "access-allowed-ttl", Value: webhook.DefaultAllowedTTL, Usage: "how long the API server's answer that a writer may get a Secret, ConfigMap or claim their object names (or that a service account is open to pools) is kept: a revoked right is refused again within it"},
			&cli.DurationFlag{Name: "access-denied-ttl", Value: webhook.DefaultDeniedTTL, Usage: "how long a refused answer is kept: a right just granted is seen within it"},
			&cli.IntFlag{Name: "max-in-flight", Usage: "admission reviews served at once (0: four per CPU); past them a review waits at most half its timeout and is then refused with 429 (evalsi_webhook_shed_total)"},
			&cli.StringFlag{Name: "client-ca-file", Usage: "answer only callers with a client certificate this CA bundle verifies: the API server's webhook client certificate (its AdmissionConfiguration's kubeConfigFile); without it anyone who reaches the port may send a review"},
			&cli.StringSliceFlag{Name: "client-name", Usage: "with --client-ca-file, the common names a caller's certificate may carry (repeatable; required: with none, no caller is answered)"},
			&cli.IntFlag{Name: "max-connections", Usage: "connections served at once (0: 32 per CPU); past them a new connection waits in the kernel's backlog instead of costing a TLS handshake"},
		}, append(command.RenderFlags, command.LogFlags...)...),
		Action: func(c *cli.Context) error {
			log, err := command.NewLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", c.String("listen"))
			if err != nil {
				return err
			}
			cfg := webhook.Config{Listener: l, CertDir: c.String("cert-dir"), Log: log, CheckInterval: c.Duration("check-interval"), MaxInFlight: c.Int("max-in-flight"), MaxConnections: c.Int("max-connections"),
				AllowedTTL: c.Duration("access-allowed-ttl"), DeniedTTL: c.Duration("access-denied-ttl")}
			if path := c.String("client-ca-file"); path != "" {
				if cfg.Clients, err = pki.ReadClients(path, c.StringSlice("client-name")); err != nil {
					return cli.Exit(fmt.Sprintf("--client-ca-file: %v", err), command.ExitUsage)
				}
			} else if len(c.StringSlice("client-name")) > 0 {
				return cli.Exit("--client-name needs --client-ca-file", command.ExitUsage)
			}
			if addr := c.String("health-probe-bind-address"); addr != "" && addr != "0" {
				if cfg.Health, err = net.Listen("tcp", addr); err != nil {
					return err
				}
			}
			rc, err := command.KubeConfig(c)
			if err != nil {
				return err
			}
			rc.QPS, rc.Burst = float32(c.Float64("kube-api-qps")), c.Int("kube-api-burst")
			rc.UserAgent = "evalsi-operator-webhook/" + version
			kube, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			cfg.Kube = kube
			opts, err := command.RenderOptions(c)
			if err != nil {
				return err
			}
			cfg.Limits = opts.Limits
			if c.Bool("dry-run-children") {
				client, err := dynamic.NewForConfig(rc)
				if err != nil {
					return err
				}
				opts.Autoscaling = true
				cfg.DryRun = &webhook.DryRun{Client: client, Render: opts, Timeout: c.Duration("dry-run-timeout")}
			}
			if c.Bool("self-signed") {
				ns, svc := c.String("namespace"), c.String("service-name")
				hosts := append([]string{svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local", svc}, c.StringSlice("host")...)
				cfg.SelfSigned = &webhook.SelfSigned{
					Kube: kube, Namespace: ns, Secret: c.String("secret-name"), Hosts: hosts,
					ValidatingConfig: c.String("validating-config"), MutatingConfig: c.String("mutating-config"),
					Validity: c.Duration("cert-validity"),
				}
			}
			if err := webhook.Run(c.Context, cfg); err != nil {
				return fmt.Errorf("webhook: %w", err)
			}
			return nil
		},
	}
}
