package pki

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Dir serves the certificate tls.crt and key tls.key of a directory (a mounted Secret that
// cert-manager or an administrator renews), read again when tls.crt changes, so that a renewed
// certificate is served without a restart.
type Dir struct {
	Path string

	mu   sync.Mutex
	mod  time.Time
	cert *tls.Certificate
}

// GetCertificate returns the directory's certificate, for tls.Config.GetCertificate.
func (d *Dir) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	crt, key := filepath.Join(d.Path, "tls.crt"), filepath.Join(d.Path, "tls.key")
	fi, err := os.Stat(crt)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cert != nil && fi.ModTime().Equal(d.mod) {
		return d.cert, nil
	}
	c, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate from %s: %w", d.Path, err)
	}
	d.cert, d.mod = &c, fi.ModTime()
	return d.cert, nil
}
