package reconcile

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/pki"
	"evals.si/operator/reconcile/process"
)

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestManagerLeadsServesHealthAndMetrics runs the manager as `run` does: it takes the Lease,
// reconciles, and serves /healthz, /readyz and /metrics.
func TestManagerLeadsServesHealthAndMetrics(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	health, metrics, profiles := freeAddr(t), freeAddr(t), freeAddr(t)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- RunManager(mctx, ManagerConfig{
			Engine: Config{Rest: env.Config, Namespace: ns, Render: testOptions,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			Config: process.Config{LeaderElect: true, LeaderElectionNamespace: ns, LeaderElectionName: "evalsi-operator",
				HealthAddr: health, MetricsAddr: metrics, PprofAddr: profiles},
		})
	}()
	defer func() {
		cancel()
		if err, ok := clustertest.Await(t, "the manager", done); ok && err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "judge", map[string]any{})
	waitReady(t, ctx, evalsi.Evaluators, ns, "judge", "True", "Available")

	lease, err := env.Clientset().CoordinationV1().Leases(ns).Get(ctx, "evalsi-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Error("the Lease has no holder")
	}
	for _, c := range []struct{ url, want string }{
		{"http://" + health + "/healthz", "ok"},
		{"http://" + health + "/readyz", "ok"},
		{"http://" + metrics + "/metrics", `evalsi_reconcile_total{controller="evaluator",result="success",shard="0/1"}`},
		{"http://" + metrics + "/metrics", `evalsi_workqueue_depth{name="evaluator",shard="0/1"}`},
		{"http://" + metrics + "/metrics", `evalsi_kube_requests_total{code="201",resource="deployments",shard="0/1",verb="PATCH"}`},
		{"http://" + metrics + "/metrics", `evalsi_kubernetes_version_supported{supported_minor="1.37",version="v1.37.`},
		{"http://" + profiles + "/debug/pprof/", "goroutine"},
	} {
		clustertest.Eventually(t, ctx, c.url, func() error {
			resp, err := http.Get(c.url)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(string(body), c.want) {
				return fmt.Errorf("%s: %d, body lacks %q", c.url, resp.StatusCode, c.want)
			}
			return nil
		})
	}
}

// startSecureMetrics runs the operator's process on namespace ns with cfg's metrics settings,
// serving metrics on a free loopback address it returns, until the test ends.
func startSecureMetrics(t *testing.T, ctx context.Context, ns string, cfg process.Config) string {
	t.Helper()
	cfg.MetricsAddr = freeAddr(t)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- RunManager(mctx, ManagerConfig{
			Engine: Config{Rest: env.Config, Namespace: ns, Render: testOptions, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			Config: cfg,
		})
	}()
	t.Cleanup(func() { cancel(); clustertest.Await(t, "the operator", done) })
	return cfg.MetricsAddr
}

// TestSecureMetrics serves /metrics over HTTPS: 401 without a valid token, 403 for a token
// without the metrics-reader permission, 200 for one with it; with a token audience, a token for
// the API server is 401 and one for that audience 200.
func TestSecureMetrics(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	cs := env.Clientset()
	metrics := startSecureMetrics(t, ctx, ns, process.Config{MetricsSecure: true})
	// One that asks for tokens issued for its own audience.
	audienced := startSecureMetrics(t, ctx, ns, process.Config{MetricsSecure: true, MetricsTokenAudience: "evalsi-metrics"})

	token := func(sa string, audiences ...string) string {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, other, readerForMetrics := token("scraper"), token("nosy"), token("scraper", "evalsi-metrics")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-metrics-reader-" + ns},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: ns}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, c := range []struct {
		addr, token string
		want        int
	}{{metrics, "", 401}, {metrics, "not-a-token", 401}, {metrics, other, 403}, {metrics, reader, 200},
		{audienced, reader, 401}, {audienced, readerForMetrics, 200}} {
		clustertest.Eventually(t, ctx, fmt.Sprintf("status %d", c.want), func() error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+c.addr+"/metrics", nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				return fmt.Errorf("status %d, want %d", resp.StatusCode, c.want)
			}
			return nil
		})
	}
}

// TestMetricsByClientCertificate serves /metrics to scrapers' client certificates alone
// (--metrics-client-ca-file): the scraper's certificate is enough, without any token, while no
// certificate, one of another CA, or one of another name gets no answer, even with a token
// allowed to get /metrics: a scraper sends nothing an endpoint could replay.
func TestMetricsByClientCertificate(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	ca, caKey, err := pki.NewCA("platform-scrapers", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cas := x509.NewCertPool()
	cas.AddCert(ca)
	metrics := startSecureMetrics(t, ctx, ns, process.Config{MetricsSecure: true,
		MetricsClients: &pki.Clients{CAs: cas, Names: []string{"prometheus"}}})
	client := func(signer *x509.Certificate, signerKey *ecdsa.PrivateKey, name string) []tls.Certificate {
		cert, key, err := pki.NewLeaf(signer, signerKey, x509.Certificate{Subject: pkix.Name{CommonName: name},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}}
	}
	other, otherKey, err := pki.NewCA("someone-else", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	get := func(certs []tls.Certificate) (int, error) {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: certs}}}
		resp, err := hc.Get("https://" + metrics + "/metrics")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	clustertest.Eventually(t, ctx, "the scraper's certificate served", func() error {
		code, err := get(client(ca, caKey, "prometheus"))
		if err != nil || code != 200 {
			return fmt.Errorf("status %d, %v", code, err)
		}
		return nil
	})
	for name, certs := range map[string][]tls.Certificate{
		"no certificate":                   nil,
		"the scraper's name, another CA":   client(other, otherKey, "prometheus"),
		"another name of the scrapers' CA": client(ca, caKey, "grafana"),
	} {
		if code, err := get(certs); err == nil {
			t.Errorf("%s: answered %d, want no answer", name, code)
		}
	}
}
