package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
)

// Clients are the callers a TLS server answers: those presenting a certificate that CAs verify
// and whose common name is one of Names. With no Names it answers no one: a CA signs more than
// the callers it is trusted for.
type Clients struct {
	CAs   *x509.CertPool
	Names []string
}

// ReadClients reads the CA bundle at path (PEM) for Clients of those names, which must be given.
func ReadClients(path string, names []string) (*Clients, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: name the common names its callers' certificates carry; with none, any certificate the CA signed would be answered", path)
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return &Clients{CAs: cas, Names: names}, nil
}

// Require makes cfg answer only c's callers: a client certificate is required and verified,
// and its common name checked. A nil c leaves cfg as it is.
func (c *Clients) Require(cfg *tls.Config) *tls.Config {
	if c == nil {
		return cfg
	}
	cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, c.CAs
	names := c.Names
	cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
		for _, chain := range chains {
			if slices.Contains(names, chain[0].Subject.CommonName) {
				return nil
			}
		}
		return fmt.Errorf("the client certificate's common name is none of %v", names)
	}
	return cfg
}
