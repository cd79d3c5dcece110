package evalsid_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"evals.si/operator/apiclient"
	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsid"
	"evals.si/operator/internal/pki"
)

// TestTokenNeedsItsOwnCertificate serves evalsid over mutual TLS, as the charts do with the
// workload CA, and calls it as pods would, through the operator's client with a credential
// bundle (key and certificate in one file, as a podCertificate volume writes it): a token is
// accepted beside a certificate of its own identity only. A stolen token with the thief's own
// certificate, a pod's certificate lending its identity to another account's token, a
// certificate of another CA naming the right identity, and a token alone are each refused.
func TestTokenNeedsItsOwnCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	write := func(name string, data ...[]byte) string {
		path := filepath.Join(dir, name)
		var all []byte
		for _, d := range data {
			all = append(all, d...)
		}
		if err := os.WriteFile(path, all, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ca, caKey, err := pki.NewCA("evalsi-workload-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, otherKey, err := pki.NewCA("someone-elses-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// bundle writes a credential bundle of a certificate naming identity, signed by the CA given.
	bundle := func(name, identity string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) string {
		crt, key, err := pki.NewLeafPEM(ca, caKey, x509.Certificate{
			Subject: pkix.Name{CommonName: identity}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, key, crt)
	}
	serving, servingKey, err := pki.NewLeafPEM(ca, caKey, x509.Certificate{
		Subject: pkix.Name{CommonName: "evalsid"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serving, servingKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	const judge, operator = "system:serviceaccount:team-a:judge", "system:serviceaccount:team-a:evalsi-operator"
	srv := evalsid.New(map[string]string{"judge-token": judge, "operator-token": operator}, evalsid.Schedule{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ctx, l, &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: roots})
	url := "https://" + l.Addr().String()
	caFile := write("ca.crt", pki.EncodeCert(ca))
	judgeCert := bundle("judge.pem", judge, ca, caKey)
	operatorCert := bundle("operator.pem", operator, ca, caKey)
	thiefCert := bundle("thief.pem", "system:serviceaccount:team-b:thief", ca, caKey)
	forgedCert := bundle("forged.pem", judge, other, otherKey)

	call := func(token, credentials string) error {
		opts := apiclient.Options{URL: url, TokenFile: write(token+".token", []byte(token)), CAFile: caFile, ClientCert: credentials, ClientKey: credentials}
		client, err := apiclient.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.Runs.BatchGetRuns(ctx, connect.NewRequest(&v1.BatchGetRunsRequest{Project: "team-a"}))
		return err
	}
	for _, tc := range []struct {
		name, token, credentials string
		refused                  bool
	}{
		{name: "a pool's token with its own certificate", token: "judge-token", credentials: judgeCert},
		{name: "the operator's token with its own certificate", token: "operator-token", credentials: operatorCert},
		{name: "a stolen token with the thief's certificate", token: "judge-token", credentials: thiefCert, refused: true},
		{name: "the operator's token with a pool's certificate", token: "operator-token", credentials: judgeCert, refused: true},
		{name: "a certificate of another CA naming the pool", token: "judge-token", credentials: forgedCert, refused: true},
		{name: "a token without a certificate", token: "judge-token", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := call(tc.token, tc.credentials)
			switch {
			case tc.refused && err == nil:
				t.Error("answered, want refused")
			case tc.refused && connect.CodeOf(err) != connect.CodeUnauthenticated && connect.CodeOf(err) != connect.CodeUnavailable:
				t.Errorf("%v, want Unauthenticated (or a refused handshake)", err)
			case !tc.refused && err != nil:
				t.Errorf("refused: %v", err)
			}
		})
	}
}
