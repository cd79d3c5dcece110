package cluster

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/pki"
)

// KedaTokenAudience is one entry of KEDA's KEDA_SERVICE_ACCOUNT_TOKEN_AUDIENCES: the audience of
// the tokens KEDA mints for a service account (boundServiceAccountToken).
type KedaTokenAudience struct {
	Audience           string `json:"audience"`
	Namespace          string `json:"namespace"`
	ServiceAccountName string `json:"serviceAccountName"`
}

// KedaNamespace is where the test KEDA keeps its cluster objects.
const KedaNamespace = "keda"

// Keda returns KEDA's operator and the admission-webhooks server of cluster/keda, built from
// KEDA's Go module into the cache on first use, with only the scalers the operator's
// ScaledObjects use (trimKeda). It needs the repository's source tree.
func Keda(ctx context.Context, progress io.Writer) (operator, webhooks string, err error) {
	cache, err := CacheDir()
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(cache, "keda-"+KedaVersion+"-trimmed")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock")) // its own: it builds beside the control plane
	if err != nil {
		return "", "", err
	}
	defer unlock()
	b := builder{cache: cache, progress: progress}
	operator, webhooks = filepath.Join(dir, "keda-operator"), filepath.Join(dir, "keda-webhooks")
	_, haveOperator := b.existing(dir, "keda-operator")
	_, haveWebhooks := b.existing(dir, "keda-webhooks")
	if haveOperator && haveWebhooks {
		return operator, webhooks, nil
	}
	// The wrapper module is copied out of the checkout, so that building it never edits the tree.
	wrapper, err := kedaWrapperDir(ctx)
	if err != nil {
		return "", "", err
	}
	src := filepath.Join(dir, "src")
	for _, f := range []string{"go.mod", "go.sum", filepath.Join("webhooks", "main.go")} {
		data, err := os.ReadFile(filepath.Join(wrapper, f))
		if err != nil {
			return "", "", fmt.Errorf("reading the KEDA wrapper module: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, f)), 0o755); err != nil {
			return "", "", err
		}
		if err := os.WriteFile(filepath.Join(src, f), data, 0o644); err != nil {
			return "", "", err
		}
	}
	module, err := DownloadModule(ctx, KedaModule, KedaVersion)
	if err != nil {
		return "", "", err
	}
	if err := trimKeda(module, filepath.Join(src, "keda")); err != nil {
		return "", "", err
	}
	if err := b.goCmd(ctx, src, "mod", "edit", "-replace", KedaModule+"=./keda"); err != nil {
		return "", "", err
	}
	fmt.Fprintf(progress, "building KEDA %s (operator with the metrics-api, cpu and memory scalers, and admission webhooks), first run only\n", KedaVersion)
	// One go build for both: they share most packages, and their links run side by side.
	tmp := filepath.Join(dir, ".build")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", "", err
	}
	if err := b.goCmd(ctx, src, "build", "-ldflags=-s -w", "-o", tmp+string(filepath.Separator), KedaModule+"/cmd/operator", "./webhooks"); err != nil {
		return "", "", err
	}
	if err := os.Rename(filepath.Join(tmp, "operator"), operator); err != nil {
		return "", "", err
	}
	return operator, webhooks, os.Rename(filepath.Join(tmp, "webhooks"), webhooks)
}

// kedaWrapperDir returns cluster/keda of the checkout that holds the working directory (the
// commands and tests run in it; the source path of this file is not known to a -trimpath build).
func kedaWrapperDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the checkout: go env GOMOD: %w", err)
	}
	dir := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "cluster", "keda")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("building KEDA needs the evalsi-operator checkout as the working directory: %w", err)
	}
	return dir, nil
}

// StartKeda runs KEDA against the cluster as KEDA's charts would, with processes on loopback: its
// CRDs, its admission webhooks (registered by URL with their own CA, failing closed) and its
// operator, which scales ScaledObjects' targets between zero and one and makes their HPAs.
// audiences configure which service accounts KEDA mints tokens for; caDirs are directories of CA
// certificates its scalers trust besides the system's (its --ca-dir, where KEDA's charts mount
// extra CAs). KEDA runs with the admin identity and stops with the cluster.
func (c *Cluster) StartKeda(ctx context.Context, audiences []KedaTokenAudience, caDirs ...string) error {
	operator, webhooks, err := Keda(ctx, c.opts.Progress)
	if err != nil {
		return err
	}
	dir, err := DownloadModule(ctx, KedaModule, KedaVersion)
	if err != nil {
		return err
	}
	if err := c.InstallCRDs(ctx, filepath.Join(dir, "config", "crd", "bases")); err != nil {
		return err
	}
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KedaNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	certDir := filepath.Join(c.Dir, "keda-certs")
	caPEM, err := writeKedaCerts(certDir)
	if err != nil {
		return fmt.Errorf("writing KEDA's certificates: %w", err)
	}
	ports, err := freePortList(5)
	if err != nil {
		return err
	}
	aud, err := json.Marshal(audiences)
	if err != nil {
		return err
	}
	env := []string{"KUBECONFIG=" + c.Kubeconfig, "WATCH_NAMESPACE=", "KEDA_CLUSTER_OBJECT_NAMESPACE=" + KedaNamespace,
		"KEDA_SERVICE_ACCOUNT_TOKEN_AUDIENCES=" + string(aud)}
	wh, err := c.startEnv("keda-webhooks", webhooks, env, "--host=127.0.0.1", "--port="+strconv.Itoa(ports[0]), "--cert-dir="+certDir)
	if err != nil {
		return err
	}
	if err := wh.poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(ports[0]))
		if err == nil {
			conn.Close()
		}
		return err
	}); err != nil {
		return err
	}
	if err := c.registerKedaWebhooks(ctx, "https://127.0.0.1:"+strconv.Itoa(ports[0]), caPEM); err != nil {
		return err
	}
	args := []string{"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[2]),
		"--metrics-service-bind-address=127.0.0.1:" + strconv.Itoa(ports[3]),
		"--cert-dir=" + certDir, "--leader-elect=false", "--enable-webhook-patching=false",
		"--enable-apiservice-patching=false", "--zap-log-level=info"}
	for _, d := range caDirs {
		args = append(args, "--ca-dir="+d)
	}
	op, err := c.startEnv("keda-operator", operator, env, args...)
	if err != nil {
		return err
	}
	return op.poll(ctx, 200*time.Millisecond, httpOK(http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(ports[2])+"/readyz"))
}

// registerKedaWebhooks registers KEDA's validating webhooks for ScaledObjects and
// TriggerAuthentications at url.
func (c *Cluster) registerKedaWebhooks(ctx context.Context, url string, caPEM []byte) error {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	hook := func(name, path, resource string) admissionregistrationv1.ValidatingWebhook {
		u := url + path
		return admissionregistrationv1.ValidatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: caPEM},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{evalsi.ScaledObjects.Group}, APIVersions: []string{evalsi.ScaledObjects.Version}, Resources: []string{resource}},
			}},
		}
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "keda-admission"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			hook("vscaledobject.kb.io", "/validate-keda-sh-v1alpha1-scaledobject", "scaledobjects"),
			hook("vstriggerauthentication.kb.io", "/validate-keda-sh-v1alpha1-triggerauthentication", "triggerauthentications"),
		},
	}
	_, err := c.Clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
	return err
}

// writeKedaCerts writes a CA and a serving certificate for loopback into dir as ca.crt, tls.crt
// and tls.key (the names KEDA's operator and webhooks read), and returns the CA in PEM.
func writeKedaCerts(dir string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, caKey, err := pki.NewCA("keda-test-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	cert, key, err := pki.NewLeaf(ca, caKey, x509.Certificate{
		Subject:     pkix.Name{CommonName: "keda"},
		DNSNames:    []string{"localhost", "keda-operator." + KedaNamespace + ".svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		return nil, err
	}
	caPEM := pki.EncodeCert(ca)
	for name, data := range map[string][]byte{"ca.crt": caPEM, "tls.crt": pki.EncodeCert(cert), "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return caPEM, nil
}
