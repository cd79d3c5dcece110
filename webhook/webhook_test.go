package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/render"
)

var env *cluster.Cluster

// shared is the package's control plane, started by the first test that calls testContext (or
// needCluster): pure tests start no process.
var shared = clustertest.New(cluster.Options{CRDDirs: []string{"../chart/evalsi-crds/files/crds"}})

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// needCluster starts the package's control plane if it has not started yet, and sets env.
func needCluster(t testing.TB) { env = shared.Get(t) }

var resources = map[string]string{
	"EvalRun": "evalruns", "OnlineEvalPolicy": "onlineevalpolicies", "TraceSource": "tracesources",
	"Evaluator": "evaluators", "SandboxClass": "sandboxclasses", "CheckpointServer": "checkpointservers",
}

func gvr(kind string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "evals.si", Version: "v1alpha1", Resource: resources[kind]}
}

func testContext(t *testing.T) context.Context {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runningWebhook is a webhook server on loopback with its configurations registered.
type runningWebhook struct {
	addr, health string
	stop         func()
}

// startWebhook registers webhook configurations pointing at a new self-signed webhook on
// loopback and waits until admission works. The configurations go when the test ends.
func startWebhook(t *testing.T, ctx context.Context, validity time.Duration, configure ...func(*Config)) runningWebhook {
	t.Helper()
	l, health := listen(t), listen(t)
	name := testName(t)
	remove, err := Register(ctx, env.Clientset(), name, "https://"+l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	w := runWebhook(t, ctx, name, l, health, validity, configure...)
	waitAdmission(t, ctx, health)
	return w
}

// runWebhook runs a self-signed webhook on l that keeps the caBundle of the configurations
// Register(name) creates, whether or not they exist yet; it stops when the test ends.
func runWebhook(t *testing.T, ctx context.Context, name string, l, health net.Listener, validity time.Duration, configure ...func(*Config)) runningWebhook {
	t.Helper()
	cs := env.Clientset()
	vwc, mwc := Configurations(name, "")
	ensureNamespace(t, ctx, "evalsi-system")
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := Config{
		Listener: l,
		Health:   health,
		SelfSigned: &SelfSigned{
			Kube: cs, Namespace: "evalsi-system", Secret: name + "-certs", Hosts: []string{"127.0.0.1"},
			ValidatingConfig: vwc.Name, MutatingConfig: mwc.Name, Validity: validity,
		},
		Kube:          cs,
		CheckInterval: 200 * time.Millisecond,
		Log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, c := range configure {
		c(&cfg)
	}
	go func() { done <- Run(wctx, cfg) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err, ok := clustertest.Await(t, "the webhook", done); ok && err != nil {
			t.Errorf("webhook: %v", err)
		}
	}
	t.Cleanup(stop)
	return runningWebhook{addr: l.Addr().String(), health: health.Addr().String(), stop: stop}
}

// waitAdmission waits until a dry-run create passes through the webhook, then checks that the
// webhook reports itself live and ready.
func waitAdmission(t *testing.T, ctx context.Context, health net.Listener) {
	t.Helper()
	ns := ensureNamespace(t, ctx, "admission")
	clustertest.Eventually(t, ctx, "admission through the webhook", func() error {
		_, err := env.Dynamic().Resource(gvr("TraceSource")).Namespace(ns).Create(ctx, traceSource("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		if code := healthStatus(t, health, path); code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
	}
}

// healthStatus returns the HTTP status of a health endpoint.
func healthStatus(t *testing.T, health net.Listener, path string) int {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + health.Addr().String() + path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testName is the test's name as a Kubernetes object name.
func testName(t *testing.T) string { return strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) }

func traceSource(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "TraceSource",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"type": "otlp"},
	}}
}

func ensureNamespace(t testing.TB, ctx context.Context, name string) string {
	// Bound to the project named like it, as a project binder binds every namespace of a project
	// once one is bound: another test binds team-b to team-a, which an unlabelled team-a would
	// then no longer act in.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{evalsi.LabelProject: name}}}
	_, err := env.Clientset().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

func readCases(t *testing.T, path string) []manifest.Document {
	docs, err := manifest.Read(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// create creates a case document through the API server (and so the webhooks).
func create(ctx context.Context, c dynamic.Interface, obj *unstructured.Unstructured) error {
	r := c.Resource(gvr(obj.GetKind()))
	var ri dynamic.ResourceInterface = r
	if ns := obj.GetNamespace(); ns != "" {
		ri = r.Namespace(ns)
	}
	_, err := ri.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

func TestAdmissionTable(t *testing.T) {
	ctx := testContext(t)
	startWebhook(t, ctx, time.Hour, func(c *Config) { c.Limits = render.Limits{MaxPoolReplicas: render.DefaultMaxPoolReplicas} })
	ensureNamespace(t, ctx, "team-a")
	// The account a valid case's pool runs as, opened to pools.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "judge.team-a", Namespace: "team-a",
		Labels: map[string]string{evalsi.LabelPoolServiceAccount: "true"}}}
	if _, err := env.Clientset().CoreV1().ServiceAccounts("team-a").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, d := range readCases(t, "../testdata/admission/invalid.yaml") {
		if d.Object.GetAPIVersion() != "evals.si/v1alpha1" {
			continue // an unserved version never reaches admission: the API server refuses it
		}
		want := d.Object.GetAnnotations()["test.evals.si/expect"]
		if d.Object.GetAnnotations()["test.evals.si/refused-by"] == "api-server" {
			// Refused by the API server's own validation, before admission: the same sentence
			// without the JSON pointer.
			_, want, _ = strings.Cut(want, ": ")
		}
		if says, ok := d.Object.GetAnnotations()["test.evals.si/api-server-expect"]; ok {
			want = says // a type the CRD's schema names: the API server refuses it before admission
		}
		// The case's own annotations go; those under test stay.
		annotations := d.Object.GetAnnotations()
		for k := range annotations {
			if strings.HasPrefix(k, "test.evals.si/") {
				delete(annotations, k)
			}
		}
		d.Object.SetAnnotations(annotations)
		err := create(ctx, env.Dynamic(), d.Object)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s %s: got %v, want an error with %q", d.Object.GetKind(), d.Object.GetName(), err, want)
		}
	}
	for _, d := range readCases(t, "../testdata/admission/valid.yaml") {
		if err := create(ctx, env.Dynamic(), d.Object); err != nil {
			t.Errorf("%s %s: %v", d.Object.GetKind(), d.Object.GetName(), err)
		}
	}
}

// asUser returns a dynamic client that impersonates user, after granting the user every verb
// on evals.si resources in ns.
func asUser(t *testing.T, ctx context.Context, ns, user string) dynamic.Interface {
	cs := env.Clientset()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "evalsi-all", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"evals.si"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "evalsi-all-" + user, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "evalsi-all"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return dynamic.NewForConfigOrDie(cfg)
}

func TestCreatorAnnotationIsWrittenByAdmission(t *testing.T) {
	ctx := testContext(t)
	startWebhook(t, ctx, time.Hour)
	ns := ensureNamespace(t, ctx, "team-creator")
	user := asUser(t, ctx, ns, "team-a-user")
	cs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "CheckpointServer",
		"metadata": map[string]any{"name": "m", "annotations": map[string]any{evalsi.AnnotationCreatedBy: "someone-else"}},
		"spec":     map[string]any{"model": "org/model"},
	}}
	var got *unstructured.Unstructured
	// The new RoleBinding reaches the API server's authorizer a moment later.
	clustertest.Eventually(t, ctx, "create as team-a-user", func() error {
		var err error
		got, err = user.Resource(gvr("CheckpointServer")).Namespace(ns).Create(ctx, cs, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot create resource") {
			return err
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	if c := got.GetAnnotations()[evalsi.AnnotationCreatedBy]; c != "team-a-user" {
		t.Fatalf("stored creator %q, want team-a-user", c)
	}
	for name, patch := range map[string]string{
		"changed": `{"metadata":{"annotations":{"evals.si/created-by":"mallory"}}}`,
		"removed": `{"metadata":{"annotations":{"evals.si/created-by":null}}}`,
	} {
		_, err := user.Resource(gvr("CheckpointServer")).Namespace(ns).Patch(ctx, "m", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), "records who created the object") {
			t.Errorf("creator annotation %s: got %v, want a rejection", name, err)
		}
	}
}

func TestEvalRunSpecImmutableWithAndWithoutWebhook(t *testing.T) {
	ctx := testContext(t)
	w := startWebhook(t, ctx, time.Hour)
	ns := ensureNamespace(t, ctx, "team-immutable")
	runs := env.Dynamic().Resource(gvr("EvalRun")).Namespace(ns)
	run := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "EvalRun", "metadata": map[string]any{"name": "r"},
		"spec": map[string]any{"suite": "smoke", "target": map[string]any{"checkpointServer": "m"}, "trials": int64(1)},
	}}
	if _, err := runs.Create(ctx, run, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"trials":2}}`)
	_, err := runs.Patch(ctx, "r", types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec is immutable: create a new EvalRun") {
		t.Fatalf("with the webhook: %v", err)
	}
	w.stop()
	_, err = runs.Patch(ctx, "r", types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec is immutable: create a new EvalRun") {
		t.Fatalf("without the webhook: %v", err)
	}
}

func TestWebhookDownLocksNothingElse(t *testing.T) {
	ctx := testContext(t)
	w := startWebhook(t, ctx, time.Hour)
	ns := ensureNamespace(t, ctx, "team-down")
	sources := env.Dynamic().Resource(gvr("TraceSource")).Namespace(ns)
	held := traceSource("held")
	held.SetFinalizers([]string{"evals.si/delete-trace-source"})
	if _, err := sources.Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sources.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.stop()

	_, err := sources.Create(ctx, traceSource("new"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("creating with the webhook down: %v, want an error that names the webhook", err)
	}
	cs := env.Clientset()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("ConfigMap with the webhook down: %v", err)
	}
	deploy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d"},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "d"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "d"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}},
		},
	}}
	if _, err := env.Dynamic().Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Errorf("Deployment with the webhook down: %v", err)
	}
	// The operator's finalizer removal on an object being deleted.
	_, err = sources.Patch(ctx, "held", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("removing the finalizer with the webhook down: %v", err)
	}
	if _, err := sources.Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("object still there after its finalizer went: %v", err)
	}
}

// servingCertificate returns the certificate the webhook serves.
func servingCertificate(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// TestSelfSignedCertificatesRotateWithoutRestart admits a write every 250 ms through a webhook
// whose certificates last 6 s, until the first one has expired: every write is admitted, and by
// then the webhook serves another certificate, so the renewal and the caBundle that trusts it
// came in time, without a restart.
func TestSelfSignedCertificatesRotateWithoutRestart(t *testing.T) {
	ctx := testContext(t)
	w := startWebhook(t, ctx, 6*time.Second)
	cfg, err := env.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "testselfsignedcertificatesrotatewithoutrestart-validation", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatal("caBundle not patched")
	}
	first := servingCertificate(t, w.addr)
	ns := ensureNamespace(t, ctx, "admission")
	for i := 0; ; i++ {
		if _, err := env.Dynamic().Resource(gvr("TraceSource")).Namespace(ns).Create(ctx, traceSource(fmt.Sprintf("r%d", i)), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatalf("admission failed during rotation: %v", err)
		}
		if time.Now().After(first.NotAfter) {
			// The API server's connections outlive a certificate's expiry: what it would meet on
			// a new one is what the webhook serves now.
			served := servingCertificate(t, w.addr)
			if served.SerialNumber.Cmp(first.SerialNumber) == 0 {
				t.Fatalf("the webhook still serves its first certificate after it expired at %s", first.NotAfter)
			}
			// And the configuration's caBundle, as the API server reads it now, verifies it.
			now, err := env.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, cfg.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(now.Webhooks[0].ClientConfig.CABundle) {
				t.Fatal("the caBundle holds no certificate")
			}
			if _, err := served.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
				t.Errorf("the caBundle in force does not verify the certificate served now: %v", err)
			}
			// Its metrics tell when the certificate served now expires, the renewed one.
			var got float64
			for _, m := range clustertest.Scrape(t, "http://"+w.health+"/metrics")["evalsi_certificate_expiry_timestamp_seconds"].GetMetric() {
				got = m.GetGauge().GetValue()
			}
			if want := float64(served.NotAfter.Unix()); got < want {
				t.Errorf("evalsi_certificate_expiry_timestamp_seconds{certificate=\"webhook-serving\"} = %v, want at least the served certificate's %v", got, want)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the serving certificate was not renewed before the test's deadline")
		case <-time.After(250 * time.Millisecond):
		}
	}
	// Every write of the certificates and the caBundles names the operator's field manager, as
	// its other writes do, so that managedFields tell who wrote them (not a user agent).
	secret, err := env.Clientset().CoreV1().Secrets("evalsi-system").Get(ctx, "testselfsignedcertificatesrotatewithoutrestart-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = env.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, cfg.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	for what, fields := range map[string][]metav1.ManagedFieldsEntry{"the Secret": secret.ManagedFields, "the validating configuration": cfg.ManagedFields} {
		for _, f := range fields {
			if f.Manager != evalsi.FieldManager {
				t.Errorf("%s has fields of manager %q (%s), want only %q", what, f.Manager, f.Operation, evalsi.FieldManager)
			}
		}
	}
}

// TestCABundleDriftIsRepaired resets the validating configuration's caBundle, as a tool that
// re-applies the configuration might: the webhook restores it at its next check (every minute by
// default; 200ms here), not when its certificate is next renewed.
func TestCABundleDriftIsRepaired(t *testing.T) {
	ctx := testContext(t)
	startWebhook(t, ctx, time.Hour)
	configs := env.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations()
	name := "testcabundledriftisrepaired-validation"
	patch := []byte(`[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":""}]`)
	if _, err := configs.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "caBundle restored", func() error {
		cfg, err := configs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(cfg.Webhooks[0].ClientConfig.CABundle) == 0 {
			return fmt.Errorf("caBundle still empty")
		}
		return nil
	})
}

// TestWebhookWaitsForItsConfigurations starts the webhook before its configurations exist, as
// Helm does (it creates the Deployment before the webhook configurations): the webhook stays
// live but unready, and serves admission once the configurations appear, without a restart.
func TestWebhookWaitsForItsConfigurations(t *testing.T) {
	ctx := testContext(t)
	l, health := listen(t), listen(t)
	name := testName(t)
	runWebhook(t, ctx, name, l, health, time.Hour)
	time.Sleep(1500 * time.Millisecond) // a few failed syncs
	if code := healthStatus(t, health, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz without configurations: %d, want 200 (the pod is alive)", code)
	}
	if code := healthStatus(t, health, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz without configurations: %d, want 503", code)
	}
	remove, err := Register(ctx, env.Clientset(), name, "https://"+l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	waitAdmission(t, ctx, health)
}
