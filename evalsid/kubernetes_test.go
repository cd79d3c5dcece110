package evalsid_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/apiclient/evalsiv1/evalsiv1connect"
	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsid"
	"evals.si/operator/render"
)

var shared = clustertest.New(cluster.Options{})

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// forge signs claims as an ES256 JWT with key and key id kid.
func forge(t *testing.T, key *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(map[string]string{"alg": "ES256", "kid": kid, "typ": "JWT"}) + "." + enc(claims)
	digest := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestKubernetesProvider checks evalsid's kubernetes: provider against tokens of the real API
// server, read as KEDA reads a pool's queue: the GET form of GetQueueDepth at the URL the operator
// renders into a ScaledObject, with a bearer token.
func TestKubernetesProvider(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Clientset()
	ns := "pools"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"judge-evaluator", "evalsi-queue-reader", "evalsid"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// evalsid reads the issuer discovery as its own service account, which the default RBAC allows,
	// and the service accounts and pods that tokens name with the Role the evalsi chart gives it.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "evalsid"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts", "pods"}, Verbs: []string{"get"}}}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "evalsid"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "evalsid"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "evalsid", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	evalsidCfg, _ := clustertest.TokenKubeconfig(t, ctx, c, ns, "evalsid")
	hc, err := rest.HTTPClientFor(evalsidCfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := evalsid.New(map[string]string{"static-token": "static"}, evalsid.DefaultSchedule)
	srv.TrustPlatform("static")
	// Answers about bound objects are kept 2 s here (30 s in evalsid's command), so that the
	// refusals below come quickly.
	srv.TrustKubernetes(&evalsid.KubernetesIssuer{APIServer: c.Config.Host, Client: hc, Audience: "evalsi",
		Bound: evalsid.NewLiveObjects(kubernetes.NewForConfigOrDie(evalsidCfg), 2*time.Second)})
	srv.SetQueueDepth("pools", v1.PoolKind_POOL_KIND_EVALUATOR, "judge", 7)
	base := serveLoopback(t, ctx, srv)

	// The URL KEDA calls, from the operator's rendering of an autoscaled Evaluator.
	evaluator := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": "judge", "namespace": ns, "uid": "u"},
		"spec":     map[string]any{"autoscaling": map[string]any{"maxReplicas": int64(3)}},
	}}
	res, err := render.Object(evaluator, render.Options{DefaultImage: "i", APIURL: base, Autoscaling: true})
	if err != nil {
		t.Fatal(err)
	}
	var queueURL string
	for _, o := range res.Objects {
		if o.GetKind() == "ScaledObject" {
			triggers, _, _ := unstructured.NestedSlice(o.Object, "spec", "triggers")
			queueURL, _, _ = unstructured.NestedString(triggers[0].(map[string]any), "metadata", "url")
		}
	}

	mintFor := func(sa string, audiences ...string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	mint := func(audiences ...string) string { return mintFor("evalsi-queue-reader", audiences...) }
	// Forged tokens need the cluster's key id and issuer, read from a real token.
	real := mint("evalsi")
	var header struct{ Kid string }
	var claims map[string]any
	parts := strings.Split(real, ".")
	for i, out := range []any{&header, &claims} {
		b, _ := base64.RawURLEncoding.DecodeString(parts[i])
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	pemKey, err := os.ReadFile(c.ServiceAccountSigningKey())
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemKey)
	clusterKey, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	with := func(changes map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range claims {
			out[k] = v
		}
		for k, v := range changes {
			out[k] = v
		}
		return out
	}
	hourAgo := time.Now().Add(-time.Hour).Unix()

	for name, tc := range map[string]struct {
		token string
		// want is the HTTP status, and for 200 the depth read.
		want  int
		depth string
	}{
		"the queue reader's token for evalsid's audience": {token: real, want: 200, depth: "7"},
		"a pool's token (pools do not read queues)":       {token: mintFor("judge-evaluator", "evalsi"), want: 403},
		"a static token still works":                      {token: "static-token", want: 200, depth: "7"},
		"a token for another audience":                    {token: mint("vault"), want: 401},
		"a token for the API server's audience":           {token: mint(), want: 401},
		"an expired token signed by the cluster":          {token: forge(t, clusterKey, header.Kid, with(map[string]any{"exp": hourAgo, "iat": hourAgo - 600, "nbf": hourAgo - 600})), want: 401},
		"a token from another issuer with its own key":    {token: forge(t, otherKey, header.Kid, with(map[string]any{"iss": "https://other.example"})), want: 401},
		"a token naming another issuer, the cluster key":  {token: forge(t, clusterKey, header.Kid, with(map[string]any{"iss": "https://other.example"})), want: 401},
		"the cluster's claims signed by another key":      {token: forge(t, otherKey, header.Kid, claims), want: 401},
		"no token": {token: "", want: 401},
	} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, queueURL, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("GET %s: %s %s, want %d", queueURL, resp.Status, body, tc.want)
			}
			if tc.want != 200 {
				return
			}
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if d := fmt.Sprint(got["depth"]); d != tc.depth {
				t.Errorf("depth %s in %s, want %s", d, body, tc.depth)
			}
		})
	}

	// A call with a pool's token is made as the pool's service account, which reads runs of its
	// project and creates none.
	runs := evalsiv1connect.NewRunServiceClient(http.DefaultClient, base)
	req := connect.NewRequest(&v1.CreateRunRequest{Project: ns, IdempotencyKey: "k", Spec: &v1.RunSpec{Suite: "smoke",
		Target: &v1.Target{Endpoint: &v1.EndpointTarget{Url: "http://m:8000/v1", Model: "m"}}}})
	req.Header().Set("Authorization", "Bearer "+mintFor("judge-evaluator", "evalsi"))
	_, err = runs.CreateRun(ctx, req)
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "system:serviceaccount:pools:judge-evaluator") {
		t.Errorf("a pool creating a run: %v, want PermissionDenied naming the pool's service account", err)
	}
}

// TestTokensOfDeletedObjectsRefused holds evalsid's kubernetes: provider to the objects a token
// names: a token of a service account that was deleted and made again under the same name (a
// year-long token outliving its account), or of a pod that was deleted, is refused once the last
// answer about it expires, though its signature, issuer, audience and lifetime are all valid.
func TestTokensOfDeletedObjectsRefused(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Clientset()
	const ns = "bound"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newAccount := func() {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "judge-evaluator"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newAccount()
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "judge-0"},
		Spec: corev1.PodSpec{ServiceAccountName: "judge-evaluator", Containers: []corev1.Container{{Name: "judge", Image: "evalsi/platform:1.4.0"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(bound *authenticationv1.BoundObjectReference) string {
		t.Helper()
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "judge-evaluator", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"evalsi"}, BoundObjectRef: bound}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	accountToken := mint(nil)
	podToken := mint(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})

	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	issuer := &evalsid.KubernetesIssuer{APIServer: c.Config.Host, Client: hc, Audience: "evalsi",
		Bound: evalsid.NewLiveObjects(cs, 2*time.Second)}
	verify := func(token string) error {
		_, err := issuer.Verify(ctx, token, time.Now())
		return err
	}
	for name, token := range map[string]string{"the account's token": accountToken, "the pod's token": podToken} {
		if err := verify(token); err != nil {
			t.Fatalf("%s while its objects exist: %v", name, err)
		}
	}

	if err := cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the deleted pod's token refused", func() error {
		if err := verify(podToken); err == nil || !strings.Contains(err.Error(), "pod bound/judge-0") {
			return fmt.Errorf("the deleted pod's token: %v", err)
		}
		return nil
	})
	if err := verify(accountToken); err != nil {
		t.Errorf("the account's token, its pod deleted: %v", err)
	}

	if err := cs.CoreV1().ServiceAccounts(ns).Delete(ctx, "judge-evaluator", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newAccount()
	clustertest.Eventually(t, ctx, "the old account's token refused, the new account's accepted", func() error {
		if err := verify(accountToken); err == nil || !strings.Contains(err.Error(), "serviceaccount bound/judge-evaluator") {
			return fmt.Errorf("the token of the deleted account: %v", err)
		}
		return verify(mint(nil))
	})
}
