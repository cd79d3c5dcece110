package podcert

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
)

// Authority is the CA that signs workload certificates, and the bundle published for them.
type Authority struct {
	Cert   *x509.Certificate
	Key    crypto.Signer
	Bundle []byte
}

// ReadAuthority reads the CA of directory dir: tls.crt and tls.key sign; ca.crt, when present,
// is the bundle to publish (it must hold tls.crt), else tls.crt is.
func ReadAuthority(dir string) (*Authority, error) {
	crt, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	if err != nil {
		return nil, fmt.Errorf("reading the signer's CA: %w", err)
	}
	key, err := os.ReadFile(filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("reading the signer's CA key: %w", err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("the signer's CA in %s: %w", dir, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the signer's CA key in %s cannot sign", dir)
	}
	if !pair.Leaf.IsCA {
		return nil, fmt.Errorf("the signer's certificate in %s is not a CA (basicConstraints CA:FALSE)", dir)
	}
	a := &Authority{Cert: pair.Leaf, Key: signer, Bundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pair.Leaf.Raw})}
	bundle, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	switch {
	case os.IsNotExist(err):
		return a, nil
	case err != nil:
		return nil, fmt.Errorf("reading the signer's CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", filepath.Join(dir, "ca.crt"))
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: pair.Leaf.NotBefore, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%s does not hold the signing CA tls.crt: its certificates would not verify what the signer issues", filepath.Join(dir, "ca.crt"))
	}
	a.Bundle = bundle
	return a, nil
}
