package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/internal/pki"
)

// TestOnlyTheAPIServerIsAnswered runs the webhook with --client-ca-file set to the CA of the
// client certificate the test control plane's API server presents to webhooks (and that
// certificate's common name): admission through the API server works, while a forged
// AdmissionReview sent straight to the webhook, without a certificate or with one of another CA,
// gets no answer at all. A webhook that accepts another name refuses the API server, which then
// fails the write (failurePolicy Fail).
func TestOnlyTheAPIServerIsAnswered(t *testing.T) {
	ctx := testContext(t)
	needCluster(t)
	caPEM, err := os.ReadFile(env.WebhookClientCA())
	if err != nil {
		t.Fatal(err)
	}
	apiServer := x509.NewCertPool()
	if !apiServer.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA in the cluster's webhook client CA file")
	}
	w := startWebhook(t, ctx, time.Hour, func(c *Config) {
		c.Clients = &pki.Clients{CAs: apiServer, Names: []string{cluster.WebhookClientName}}
	})

	// A forged review: a SubjectAccessReview's answer is what it would learn.
	review := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"evals.si","version":"v1alpha1","kind":"Evaluator"},` +
		`"resource":{"group":"evals.si","version":"v1alpha1","resource":"evaluators"},"namespace":"team-a","operation":"CREATE","userInfo":{"username":"mallory"},` +
		`"object":{"apiVersion":"evals.si/v1alpha1","kind":"Evaluator","metadata":{"name":"probe","namespace":"team-a"},"spec":{"env":[{"name":"X","valueFrom":{"secretKeyRef":{"name":"db","key":"k"}}}]}}}}`)
	otherCA, otherKey, err := pki.NewCA("someone-else", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	forgedCert, forgedKey, err := pki.NewLeaf(otherCA, otherKey, x509.Certificate{
		Subject: pkix.Name{CommonName: cluster.WebhookClientName}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string][]tls.Certificate{
		"no client certificate":                 nil,
		"the API server's name from another CA": {{Certificate: [][]byte{forgedCert.Raw}, PrivateKey: forgedKey, Leaf: forgedCert}},
	} {
		t.Run(name, func(t *testing.T) {
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
				InsecureSkipVerify: true, // the caller is what is tested, not the webhook's certificate
				Certificates:       certs,
			}}}
			resp, err := client.Post("https://"+w.addr+ValidatePath, "application/json", bytes.NewReader(review))
			if err == nil {
				resp.Body.Close()
				t.Fatalf("a forged review was answered: %s", resp.Status)
			}
		})
	}

	t.Run("a webhook that accepts another name", func(t *testing.T) {
		l, health := listen(t), listen(t)
		remove, err := Register(ctx, env.Clientset(), "another-name", "https://"+l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(remove)
		runWebhook(t, ctx, "another-name", l, health, time.Hour, func(c *Config) {
			c.Clients = &pki.Clients{CAs: apiServer, Names: []string{"someone-else"}}
		})
		ns := ensureNamespace(t, ctx, "admission")
		clustertest.Eventually(t, ctx, "a write failed by the webhook that does not accept the API server's name", func() error {
			_, err := env.Dynamic().Resource(gvr("TraceSource")).Namespace(ns).Create(ctx, traceSource("names"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !strings.Contains(err.Error(), "failed calling webhook") || !strings.Contains(err.Error(), l.Addr().String()) {
				return fmt.Errorf("the write: %v", err)
			}
			return nil
		})
	})
}
