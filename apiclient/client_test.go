package apiclient_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"evals.si/operator/apiclient"
	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsid"
	"evals.si/operator/evalsid/evalsidtest"
	"evals.si/operator/internal/pki"
)

// pkiFiles writes a CA, a server certificate for 127.0.0.1 and a client certificate of the
// operator of namespace p, as the chart's cert-manager Certificate names it.
func pkiFiles(t *testing.T) (dir string, pool *x509.CertPool, server tls.Certificate) {
	t.Helper()
	dir = t.TempDir()
	ca, caKey, err := pki.NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", pki.EncodeCert(ca))
	for _, leaf := range []struct {
		name  string
		tmpl  x509.Certificate
		store *tls.Certificate
	}{
		{"server", x509.Certificate{Subject: pkix.Name{CommonName: "evalsid"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, &server},
		{"client", x509.Certificate{Subject: pkix.Name{CommonName: "system:serviceaccount:p:evalsi-operator"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, nil},
	} {
		cert, key, err := pki.NewLeaf(ca, caKey, leaf.tmpl, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, err := pki.EncodeKey(key)
		if err != nil {
			t.Fatal(err)
		}
		write(leaf.name+".crt", pki.EncodeCert(cert))
		write(leaf.name+".key", keyPEM)
		if leaf.store != nil {
			if *leaf.store, err = tls.X509KeyPair(pki.EncodeCert(cert), keyPEM); err != nil {
				t.Fatal(err)
			}
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return dir, pool, server
}

// TestMutualTLS calls the reference evalsid over TLS that requires a client certificate: the
// client with its certificate, CA and token gets through; without the certificate it does not.
func TestMutualTLS(t *testing.T) {
	dir, pool, serverCert := pkiFiles(t)
	srv := httptest.NewUnstartedServer(evalsid.New(map[string]string{"tok": "system:serviceaccount:p:evalsi-operator"}, evalsid.Schedule{}).Handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("tok\n"), 0o600)

	ctx := context.Background()
	req := connect.NewRequest(&v1.CreateRunRequest{Project: "p", IdempotencyKey: "k", Spec: &v1.RunSpec{
		Suite: "smoke", Target: &v1.Target{Endpoint: &v1.EndpointTarget{Url: "http://m/v1", Model: "m"}},
	}})
	c, err := apiclient.New(apiclient.Options{URL: srv.URL, TokenFile: token, CAFile: filepath.Join(dir, "ca.crt"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key")})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Runs.CreateRun(ctx, req)
	if err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if resp.Msg.Run.Creator != "system:serviceaccount:p:evalsi-operator" {
		t.Errorf("creator %q, want the token's identity", resp.Msg.Run.Creator)
	}

	noCert, err := apiclient.New(apiclient.Options{URL: srv.URL, TokenFile: token, CAFile: filepath.Join(dir, "ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noCert.Runs.CreateRun(ctx, req); err == nil {
		t.Error("a client without a certificate got through")
	}
	untrusted, err := apiclient.New(apiclient.Options{URL: srv.URL, TokenFile: token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusted.Runs.CreateRun(ctx, req); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client that does not trust the server's CA: %v", err)
	}
}

// TestCallDeadline gives up on a server that does not answer within the call timeout.
func TestCallDeadline(t *testing.T) {
	api := evalsid.New(map[string]string{"tok": "system:serviceaccount:p:evalsi-operator"}, evalsid.Schedule{})
	evalsidtest.Inject(api).SetLatency(2 * time.Second)
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("tok"), 0o600)
	c, err := apiclient.New(apiclient.Options{URL: srv.URL, TokenFile: token, CallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Runs.GetRun(context.Background(), connect.NewRequest(&v1.GetRunRequest{Project: "p", Id: "x"}))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("err %v, want DeadlineExceeded", err)
	}
}

// TestObserveTimesEachCall: Observe is told each call's method, code and how long it took (the
// operator's evalsi_evalsid_call_duration_seconds), for a call answered late and for one
// its deadline cut.
func TestObserveTimesEachCall(t *testing.T) {
	api := evalsid.New(map[string]string{"tok": "system:serviceaccount:p:evalsi-operator"}, evalsid.Schedule{})
	faults := evalsidtest.Inject(api)
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("tok"), 0o600)
	type observed struct {
		method, code string
		took         time.Duration
	}
	var got []observed
	c, err := apiclient.New(apiclient.Options{URL: srv.URL, TokenFile: token, CallTimeout: 400 * time.Millisecond,
		Observe: func(method, code string, took time.Duration) { got = append(got, observed{method, code, took}) }})
	if err != nil {
		t.Fatal(err)
	}
	faults.SetLatency(150 * time.Millisecond)
	c.Runs.GetRun(context.Background(), connect.NewRequest(&v1.GetRunRequest{Project: "p", Id: "x"}))
	faults.SetLatency(2 * time.Second)
	c.Runs.BatchGetRuns(context.Background(), connect.NewRequest(&v1.BatchGetRunsRequest{Project: "p"}))
	if len(got) != 2 {
		t.Fatalf("observed %+v, want two calls", got)
	}
	for i, want := range []struct {
		method, code string
		atLeast      time.Duration
	}{{"GetRun", "not_found", 150 * time.Millisecond}, {"BatchGetRuns", "deadline_exceeded", 400 * time.Millisecond}} {
		if g := got[i]; g.method != want.method || g.code != want.code || g.took < want.atLeast || g.took > want.atLeast+time.Second {
			t.Errorf("call %d observed as %+v, want %s %s taking about %v", i, g, want.method, want.code, want.atLeast)
		}
	}
}

// TestServerRefusesCredentialsInURLs: the reference evalsid, like the validation in front of it,
// refuses a run whose endpoint URL carries credentials (InvalidArgument), and takes one that names
// the variable holding the key.
func TestServerRefusesCredentialsInURLs(t *testing.T) {
	srv := httptest.NewServer(evalsid.New(map[string]string{"tok": "system:serviceaccount:p:evalsi-operator"}, evalsid.Schedule{}).Handler())
	defer srv.Close()
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("tok"), 0o600)
	c, err := apiclient.New(apiclient.Options{URL: srv.URL, TokenFile: token, CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	create := func(key, url string) error {
		_, err := c.Runs.CreateRun(context.Background(), connect.NewRequest(&v1.CreateRunRequest{Project: "p", IdempotencyKey: key, Spec: &v1.RunSpec{
			Suite: "smoke", Target: &v1.Target{Endpoint: &v1.EndpointTarget{Url: url, Model: "m", ApiKeyEnv: "MODEL_KEY"}},
		}}))
		return err
	}
	if err := create("with-credentials", "https://user:sk-123@model.example/v1"); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a URL with credentials: %v, want InvalidArgument", err)
	}
	if err := create("named-key", "https://model.example/v1"); err != nil {
		t.Errorf("a URL without credentials: %v", err)
	}
}
