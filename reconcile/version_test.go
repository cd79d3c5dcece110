package reconcile

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"

	"evals.si/operator/evalsi"
)

// versionProxy is an API server that says it is gitVersion: a proxy in front of the test control
// plane that answers /version itself and passes everything else on with the admin identity.
func versionProxy(t *testing.T, gitVersion, minor string) *rest.Config {
	t.Helper()
	forward := apiServerProxy(t)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" {
			json.NewEncoder(w).Encode(version.Info{Major: "1", Minor: minor, GitVersion: gitVersion})
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400}
}

// TestUnsupportedMinor runs the engine against a server that says it is Kubernetes 1.38: it
// warns, records the version as unsupported in its metrics and writes nothing, until told to run
// anyway.
func TestUnsupportedMinor(t *testing.T) {
	ctx := testContext(t)
	ns := newNamespace(t, ctx, "")
	create(t, ctx, evalsi.Evaluators, ns, "Evaluator", "pool", map[string]any{"replicas": int64(1)})

	refused := startEngine(t, Config{Namespace: ns, Rest: versionProxy(t, "v1.38.0", "38")})
	time.Sleep(2 * time.Second) // several discovery passes
	if _, err := client(evalsi.Deployments, ns).Get(ctx, "pool-evaluator", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pool's Deployment on an unsupported minor: %v, want none", err)
	}
	if w := writes(refused.Engine); w != 0 {
		t.Errorf("%v writes on an unsupported minor, want 0", w)
	}
	if refused.Synced() {
		t.Error("Synced (and so /readyz) on an unsupported minor")
	}
	if !strings.Contains(refused.logs.String(), "Kubernetes v1.38.0 (minor 1.38) is not the supported minor 1.37: not reconciling") {
		t.Errorf("no refusal in the log:\n%s", refused.logs.String())
	}
	want := "# HELP evalsi_kubernetes_version_supported 1 when the API server's Kubernetes minor (label version) is the one the operator supports, else 0.\n" +
		"# TYPE evalsi_kubernetes_version_supported gauge\n" +
		"evalsi_kubernetes_version_supported{supported_minor=\"" + evalsi.KubernetesMinor + "\",version=\"v1.38.0\"} 0\n"
	if err := testutil.GatherAndCompare(refused.Registry(), strings.NewReader(want), "evalsi_kubernetes_version_supported"); err != nil {
		t.Error(err)
	}
	refused.stop()
	refused.wait(t)

	allowed := startEngine(t, Config{Namespace: ns, Rest: versionProxy(t, "v1.38.0", "38"), AllowUnsupportedMinor: true})
	waitReady(t, ctx, evalsi.Evaluators, ns, "pool", "True", "Available")
	if !strings.Contains(allowed.logs.String(), "reconciling anyway") {
		t.Errorf("no warning in the log:\n%s", allowed.logs.String())
	}
}
