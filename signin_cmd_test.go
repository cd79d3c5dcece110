package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/operator/evalsid"
	"evals.si/operator/internal/pki"
)

// TestCheckSignInAgainstMutualTLS runs check-sign-in, as a pool's pod would, against evalsid
// served as the evalsid command serves it (its client CA bundles read again at each handshake):
// a pod's token with its own certificate signs in; with another identity's certificate it is
// refused and the command fails; after the workload CA rotates in the bundle file, a
// certificate of the new CA signs in with no restart of evalsid.
func TestCheckSignInAgainstMutualTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	write := func(name string, data ...[]byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, bytes.Join(data, nil), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey) {
		ca, key, err := pki.NewCA(name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return ca, key
	}
	leaf := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl x509.Certificate) ([]byte, []byte) {
		crt, key, err := pki.NewLeafPEM(ca, caKey, tmpl, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return crt, key
	}
	serverCA, serverCAKey := newCA("evalsid-ca")
	crt, key := leaf(serverCA, serverCAKey, x509.Certificate{Subject: pkix.Name{CommonName: "evalsid"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	workloadCA, workloadKey := newCA("evalsi-workload-ca")
	bundle := write("workloads.crt", pki.EncodeCert(workloadCA))
	cfg, err := serverTLS(write("tls.crt", crt), write("tls.key", key), clientTrust{files: []string{bundle}})
	if err != nil {
		t.Fatal(err)
	}
	const judge = "system:serviceaccount:team-a:judge"
	srv := evalsid.New(map[string]string{"judge-token": judge}, evalsid.Schedule{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ctx, l, cfg)
	credentials := func(name, identity string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) string {
		crt, key := leaf(ca, caKey, x509.Certificate{Subject: pkix.Name{CommonName: identity}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return write(name, key, crt)
	}
	signIn := func() (int, string) {
		var out, errOut bytes.Buffer
		code := execute(ctx, []string{"evalsi-operator", "check-sign-in"}, nil, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	t.Setenv("EVALSI_API_URL", "https://"+l.Addr().String())
	t.Setenv("EVALSI_TOKEN_FILE", write("token", []byte("judge-token")))
	t.Setenv("EVALSI_API_CA_FILE", write("ca.crt", pki.EncodeCert(serverCA)))
	t.Setenv("EVALSI_PROJECT", "team-a")

	rotated, rotatedKey := newCA("evalsi-workload-ca-2")
	for _, tc := range []struct {
		name, credentials string
		rotate            bool
		want              int
		says              string
	}{
		{name: "its own certificate", credentials: credentials("judge.pem", judge, workloadCA, workloadKey),
			says: "certificate: " + judge + ", issued by evalsi-workload-ca"},
		{name: "another identity's certificate", credentials: credentials("thief.pem", "system:serviceaccount:team-b:thief", workloadCA, workloadKey),
			want: 1, says: "evalsid: not signed in"},
		{name: "a certificate of the rotated CA, evalsid not restarted", rotate: true,
			credentials: credentials("judge-2.pem", judge, rotated, rotatedKey), says: "evalsid: signed in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rotate {
				write("workloads.crt", pki.EncodeCert(workloadCA), pki.EncodeCert(rotated))
			}
			t.Setenv("EVALSI_CLIENT_CREDENTIALS_FILE", tc.credentials)
			code, out := signIn()
			if code != tc.want || !strings.Contains(out, tc.says) {
				t.Errorf("exit %d, want %d, saying %q:\n%s", code, tc.want, tc.says, out)
			}
		})
	}
}
