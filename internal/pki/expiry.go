package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
)

// expiryHelp is the help of the metric Expiry reports.
const expiryHelp = "When a certificate the process serves or presents expires (its first certificate's notAfter, Unix seconds), by what it is for; read from its file at each scrape, so a renewal shows at once."

// expiryDesc is the metric Expiry reports.
var expiryDesc = prometheus.NewDesc("evalsi_certificate_expiry_timestamp_seconds", expiryHelp, []string{"certificate"}, nil)

// Expiry is a Prometheus collector of when the certificates of a process expire: by what each
// is for ("metrics", "evalsid-client", "evalsid-ca"), the path of its PEM file, read at each
// scrape. A file that cannot be read or holds no certificate reports no series for it: whatever
// uses the file fails on its own, and an alert on the series sees it go.
type Expiry map[string]string

// Describe implements prometheus.Collector.
func (e Expiry) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

// Collect implements prometheus.Collector.
func (e Expiry) Collect(ch chan<- prometheus.Metric) {
	for name, path := range e {
		cert, err := firstCertificate(path)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(cert.NotAfter.Unix()), name)
	}
}

// firstCertificate parses the first certificate of the PEM file at path.
func firstCertificate(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no certificate")
		}
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parsing %s: %w", path, err)
			}
			return cert, nil
		}
	}
}

// ServedExpiry is a Prometheus collector of when the certificate a server serves now expires,
// reported as Expiry reports a file's, under Name: Get is the server's tls.Config.GetCertificate,
// asked at each scrape, so a renewed certificate shows at once. An error reports no series.
type ServedExpiry struct {
	Name string
	Get  func(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// Describe implements prometheus.Collector.
func (s ServedExpiry) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

// Collect implements prometheus.Collector.
func (s ServedExpiry) Collect(ch chan<- prometheus.Metric) {
	cert, err := s.Get(nil)
	if err != nil || cert == nil || len(cert.Certificate) == 0 {
		return
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return
		}
	}
	ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(leaf.NotAfter.Unix()), s.Name)
}
