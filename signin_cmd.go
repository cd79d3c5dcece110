package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"

	"evals.si/operator/apiclient"
	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/render"
)

func checkSignInCommand() *cli.Command {
	return &cli.Command{
		Name:  "check-sign-in",
		Usage: "sign in to evalsid as a pool pod does (its token, its client certificate, the CA it was handed) and say whether evalsid accepts it",
		Description: `Run it in a pool's pod (kubectl exec) to tell a pool that cannot reach evalsid from one that
evalsid refuses: it reads the variables the operator gives pool pods, prints the identity its
client certificate names, and makes one call. Exit status 0 when evalsid authenticated the call
(whatever it then allowed), 1 when it refused the token or the certificate, or could not be
reached.

Example:
  kubectl exec deploy/judge-evaluator -c evaluator -- evalsi-operator check-sign-in`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "api-url", EnvVars: []string{"EVALSI_API_URL"}, Required: true, Usage: "evalsid's URL"},
			&cli.StringFlag{Name: "token-file", EnvVars: []string{render.TokenFileEnv}, Required: true, Usage: "the projected token"},
			&cli.StringFlag{Name: "ca-file", EnvVars: []string{render.APICAFileEnv}, Usage: "the CA that verifies evalsid (default: the system's roots)"},
			&cli.StringFlag{Name: "credentials-file", EnvVars: []string{render.ClientCredentialsFileEnv}, Usage: "the client certificate: a PEM bundle of the key and the certificate chain"},
			&cli.StringFlag{Name: "project", EnvVars: []string{"EVALSI_PROJECT"}, Usage: "the project the call names"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "the call's deadline"},
		},
		Action: func(c *cli.Context) error {
			out := c.App.Writer
			if f := c.String("credentials-file"); f != "" {
				pair, err := tls.LoadX509KeyPair(f, f)
				if err != nil {
					return fmt.Errorf("the client certificate %s: %w", f, err)
				}
				fmt.Fprintf(out, "certificate: %s, issued by %s, valid until %s\n", identityOf(pair.Leaf), pair.Leaf.Issuer.CommonName, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
			} else {
				fmt.Fprintln(out, "certificate: none")
			}
			if _, err := os.Stat(c.String("token-file")); err != nil {
				return fmt.Errorf("the token: %w", err)
			}
			client, err := apiclient.New(apiclient.Options{URL: c.String("api-url"), TokenFile: c.String("token-file"), CAFile: c.String("ca-file"),
				ClientCert: c.String("credentials-file"), ClientKey: c.String("credentials-file"), CallTimeout: c.Duration("timeout")})
			if err != nil {
				return err
			}
			_, err = client.Runs.BatchGetRuns(c.Context, connect.NewRequest(&v1.BatchGetRunsRequest{Project: c.String("project")}))
			var ce *connect.Error
			switch {
			case err == nil:
				fmt.Fprintln(out, "evalsid: signed in")
			case errors.As(err, &ce) && ce.Code() != connect.CodeUnauthenticated && ce.Code() != connect.CodeUnavailable && ce.Code() != connect.CodeUnknown && ce.Code() != connect.CodeDeadlineExceeded:
				fmt.Fprintf(out, "evalsid: signed in (the call itself: %v)\n", err)
			default:
				fmt.Fprintf(out, "evalsid: not signed in: %v\n", err)
				return cli.Exit("", 1)
			}
			return nil
		},
	}
}

// identityOf is what a certificate names: its common name, and its URIs.
func identityOf(cert *x509.Certificate) string {
	s := cert.Subject.CommonName
	for _, u := range cert.URIs {
		s += " " + u.String()
	}
	return s
}
