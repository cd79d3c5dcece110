package devenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"evals.si/operator/cluster"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/render"
	"evals.si/operator/webhook"
)

// devWebhookNamespace holds the webhook's self-signed certificates in dev, as in a real install,
// and devWebhookName prefixes the names of its configurations.
const (
	devWebhookNamespace = "evalsi-system"
	devWebhookName      = "evalsi-dev"
	devWebhookSecret    = "evalsi-webhook-certs"
)

// startDevAdmission runs the admission webhook as a real install does, but as a local server
// registered by URL: its own CA, validation with render.Validate under the operator's limits, the
// creator annotation, project bindings. It returns once the API server admits through it, and the webhook's errors on errc.
//
// The webhook runs until runCtx ends; ctx bounds the setup.
func startDevAdmission(ctx, runCtx context.Context, c *cluster.Cluster, in *installer, limits render.Limits, out io.Writer) (errc <-chan error, err error) {
	kube := c.Clientset()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": devWebhookNamespace}}}
	if err := in.apply(ctx, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, ns); err != nil {
		return nil, err
	}
	// What the webhook makes itself: its certificates and its two configurations.
	admission := func(r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: r}
	}
	for _, o := range []struct {
		gvr             schema.GroupVersionResource
		namespace, name string
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, devWebhookNamespace, devWebhookSecret},
		{admission("validatingwebhookconfigurations"), "", devWebhookName + "-validation"},
		{admission("mutatingwebhookconfigurations"), "", devWebhookName + "-creator"},
	} {
		if err := in.expect(ctx, o.gvr, o.namespace, o.name); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if _, err := webhook.Register(ctx, kube, devWebhookName, "https://"+l.Addr().String()); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(c.Dir, "webhook.log"))
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		defer logFile.Close()
		done <- webhook.Run(runCtx, webhook.Config{
			Listener: l,
			SelfSigned: &webhook.SelfSigned{
				Kube: kube, Namespace: devWebhookNamespace, Secret: devWebhookSecret, Hosts: []string{"127.0.0.1"},
				ValidatingConfig: devWebhookName + "-validation", MutatingConfig: devWebhookName + "-creator", Validity: 24 * time.Hour,
			},
			Kube:   kube,
			Limits: limits,
			Log:    slog.New(slog.NewTextHandler(logFile, nil)),
		})
	}()
	// In force once a dry run of an invalid object is refused by the webhook.
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": evalsi.Group + "/" + evalsi.Version, "kind": "TraceSource",
		"metadata": map[string]any{"name": "admission-probe", "namespace": devWebhookNamespace},
		"spec":     map[string]any{"type": "no-such-type"},
	}}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("the webhook stopped: %v", err)
		default:
		}
		_, err := c.Dynamic().Resource(evalsi.TraceSources).Namespace(devWebhookNamespace).Create(ctx, probe,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for admission through the webhook: %w", err)
	}
	fmt.Fprintf(out, "admission webhook serving on %s (log: %s)\n", l.Addr(), logFile.Name())
	return done, nil
}

// devPolicies are the chart's templates of the admission policies built into the API server.
var devPolicies = []string{"templates/creator.yaml", "templates/policy.yaml", "templates/bindings.yaml", "templates/references.yaml"}

// applyDevPolicies renders the admission policies of the checkout's evalsi-crds chart (under
// root) with helm (built into the cache on first use) and applies them: the creator written and
// held by the API server, the fence of the operator's service accounts, the guard of the
// namespaces' project bindings, and the references of workloads held to their writer.
func applyDevPolicies(ctx context.Context, c *cluster.Cluster, in *installer, root string, out io.Writer) error {
	helm, err := cluster.Helm(ctx, out)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "chart", "evalsi-crds")
	args := []string{"template", "evalsi-crds", dir, "--kube-version", evalsi.KubernetesMinor + ".0", "--set", "webhook.enabled=false"}
	for _, t := range devPolicies {
		args = append(args, "--show-only", t)
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(c.Dir, "helm"), "HELM_CONFIG_HOME="+filepath.Join(c.Dir, "helm"), "HELM_DATA_HOME="+filepath.Join(c.Dir, "helm"))
	rendered, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("rendering the admission policies: %w", err)
	}
	docs, err := manifest.Decode("evalsi-crds", bytes.NewReader(rendered))
	if err != nil {
		return err
	}
	for _, d := range docs {
		gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: pluralOf(d.Object.GetKind())}
		if err := in.apply(ctx, gvr, d.Object); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "admission policies applied: %d objects from evalsi-crds\n", len(docs))
	return nil
}

// pluralOf is the resource of an admission policy kind.
func pluralOf(kind string) string {
	lower := strings.ToLower(kind)
	if strings.HasSuffix(lower, "policy") {
		return strings.TrimSuffix(lower, "y") + "ies"
	}
	return lower + "s"
}
