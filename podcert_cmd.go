package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/command"
	"evals.si/operator/podcert"
)

func podCertificateSignerCommand() *cli.Command {
	return &cli.Command{
		Name:  "pod-certificate-signer",
		Usage: "issue the workload certificates pools mount (podCertificate volumes of signer " + evalsi.WorkloadSigner + ") and publish their CA as a ClusterTrustBundle",
		Description: `The platform's signer, which chart evalsi-crds runs (workloadCertificates). Each certificate
names the pod's service account (common name system:serviceaccount:<namespace>:<name>, and a
SPIFFE URI); evalsid holds it to the token sent beside it. The CA is a Secret of --namespace
(tls.crt, tls.key, and ca.crt to publish while a CA is rotated), made at the first start when
it does not exist and read again at each request.

Example:
  evalsi-operator pod-certificate-signer --namespace=evalsi-system --ca-secret=evalsi-workload-ca`,
		Flags: append([]cli.Flag{
			command.KubeconfigFlag(""), command.ContextFlag(),
			&cli.StringFlag{Name: "signer-name", Value: evalsi.WorkloadSigner, Usage: "the signer name whose requests it issues"},
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Required: true, Usage: "the signer's namespace, of its CA Secret"},
			&cli.StringFlag{Name: "ca-secret", Value: "evalsi-workload-ca", Usage: "the Secret of the CA: tls.crt, tls.key, optionally ca.crt; made when it does not exist"},
			&cli.DurationFlag{Name: "certificate-lifetime", Value: 24 * time.Hour, Usage: "a certificate's lifetime (at least 1h; kubelets renew at two thirds)"},
			&cli.StringFlag{Name: "trust-domain", Value: "cluster.local", Usage: "the SPIFFE trust domain of the certificates' URIs"},
			&cli.StringSliceFlag{Name: "secret-certificate", Usage: "NAMESPACE/SECRET=SERVICEACCOUNT: keep in that Secret a certificate naming that account, for a client that reads its certificate from a Secret (KEDA's ClusterTriggerAuthentication); renewed at two thirds of its lifetime and when the CA changes (repeatable)"},
			&cli.IntFlag{Name: "workers", Value: 2, Usage: "requests issued in parallel"},
			&cli.DurationFlag{Name: "resync", Value: time.Minute, Usage: "how often the ClusterTrustBundle is compared with the CA directory"},
			&cli.StringFlag{Name: "health-probe-bind-address", Value: ":8081", Usage: "address of /healthz and /readyz (ready: signing, and the CA reads) (0 disables)"},
		}, command.LogFlags...),
		Action: func(c *cli.Context) error {
			if c.Duration("certificate-lifetime") < time.Hour {
				return cli.Exit("--certificate-lifetime: the API server refuses pod certificates of less than 1h", command.ExitUsage)
			}
			log, err := command.NewLogger(c, c.App.ErrWriter)
			if err != nil {
				return cli.Exit(err.Error(), command.ExitUsage)
			}
			rc, err := command.KubeConfig(c)
			if err != nil {
				return err
			}
			client, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			var secrets []podcert.SecretCertificate
			for _, v := range c.StringSlice("secret-certificate") {
				sc, err := podcert.ParseSecretCertificate(v)
				if err != nil {
					return cli.Exit("--secret-certificate="+err.Error(), command.ExitUsage)
				}
				secrets = append(secrets, sc)
			}
			s := &podcert.Signer{Secrets: secrets, Client: client, Name: c.String("signer-name"), Log: log,
				CA:     podcert.CASecret{Client: client, Namespace: c.String("namespace"), Name: c.String("ca-secret")},
				Policy: podcert.Policy{Lifetime: c.Duration("certificate-lifetime"), TrustDomain: c.String("trust-domain")}}
			if addr := c.String("health-probe-bind-address"); addr != "0" {
				l, err := net.Listen("tcp", addr)
				if err != nil {
					return err
				}
				health := http.NewServeMux()
				health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
				health.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
					if err := s.Ready(r.Context()); err != nil {
						http.Error(w, err.Error(), http.StatusServiceUnavailable)
						return
					}
					fmt.Fprintln(w, "ok")
				})
				srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: health}
				go func() {
					if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
						log.Error("serving /healthz and /readyz", "err", err)
					}
				}()
				defer srv.Close()
			}
			log.Info("signing pod certificates", "signer", s.Name, "lifetime", s.Policy.Lifetime)
			return s.Run(c.Context, c.Int("workers"), c.Duration("resync"))
		},
	}
}
