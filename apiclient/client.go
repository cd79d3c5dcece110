// Package apiclient is the operator's client of evalsid's RunService and MonitorService over
// Connect: a bearer token read from a file (re-read when the kubelet rotates it), TLS with a CA
// and an optional client certificate, and a deadline on every call.
package apiclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"evals.si/operator/apiclient/evalsiv1/evalsiv1connect"
)

// Options configure a client.
type Options struct {
	// URL is evalsid's base URL (http:// or https://).
	URL string
	// TokenFile holds the bearer token; it is read again whenever it changes.
	TokenFile string
	// CAFile verifies the server; empty uses the system roots.
	CAFile string
	// ClientCert and ClientKey are a client certificate for mutual TLS (optional).
	ClientCert, ClientKey string
	// CallTimeout is every call's deadline; 10s when zero.
	CallTimeout time.Duration
	// Observe, when set, is told each call's method, result code ("ok" or a Connect code) and
	// how long it took, answered or not.
	Observe func(method, code string, took time.Duration)
	// Interceptors run around every call, the first outermost, and around the client's own
	// (deadline, token, Observe): a call one of them refuses is neither sent nor observed.
	Interceptors []connect.Interceptor
}

// Client holds the Connect clients of both services.
type Client struct {
	Runs    evalsiv1connect.RunServiceClient
	Monitor evalsiv1connect.MonitorServiceClient
}

// New returns a client for opts. It reads no file and makes no call until the first request.
func New(opts Options) (*Client, error) {
	if opts.URL == "" {
		return nil, errors.New("no evalsid URL")
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 10 * time.Second
	}
	hc, err := httpClient(opts)
	if err != nil {
		return nil, err
	}
	base := strings.TrimRight(opts.URL, "/")
	interceptors := connect.WithInterceptors(append(slices.Clone(opts.Interceptors), callInterceptor(opts, &tokenFile{path: opts.TokenFile}))...)
	return &Client{
		Runs:    evalsiv1connect.NewRunServiceClient(hc, base, interceptors),
		Monitor: evalsiv1connect.NewMonitorServiceClient(hc, base, interceptors),
	}, nil
}

// httpClient returns the HTTP client: TLS with the CA and client certificate for https URLs.
func httpClient(opts Options) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if strings.HasPrefix(opts.URL, "https://") {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if opts.CAFile != "" {
			pem, err := os.ReadFile(opts.CAFile)
			if err != nil {
				return nil, fmt.Errorf("reading the API CA file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("no certificate in the API CA file %s", opts.CAFile)
			}
		}
		if opts.ClientCert != "" || opts.ClientKey != "" {
			if _, err := tls.LoadX509KeyPair(opts.ClientCert, opts.ClientKey); err != nil {
				return nil, fmt.Errorf("loading the API client certificate: %w", err)
			}
			// Read at each handshake, so that a renewed certificate is used without a restart.
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				c, err := tls.LoadX509KeyPair(opts.ClientCert, opts.ClientKey)
				return &c, err
			}
		}
		tr.TLSClientConfig = cfg
		tr.ForceAttemptHTTP2 = true
	}
	return &http.Client{Transport: tr}, nil
}

// callInterceptor gives each call its deadline and bearer token and reports its result.
func callInterceptor(opts Options, token *tokenFile) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			ctx, cancel := context.WithTimeout(ctx, opts.CallTimeout)
			defer cancel()
			if token.path != "" {
				t, err := token.read()
				if err != nil {
					return nil, connect.NewError(connect.CodeUnauthenticated, err)
				}
				req.Header().Set("Authorization", "Bearer "+t)
			}
			start := time.Now()
			resp, err := next(ctx, req)
			if opts.Observe != nil {
				code := "ok"
				if err != nil {
					code = connect.CodeOf(err).String()
				}
				proc := req.Spec().Procedure
				opts.Observe(proc[strings.LastIndex(proc, "/")+1:], code, time.Since(start))
			}
			return resp, err
		}
	}
}

// tokenFile is a bearer token in a file, read again when the file's size or time changes (the
// kubelet replaces a projected token by swapping a symlink, which changes both). client-go's
// transport.NewCachedFileTokenSource does not fit: it re-reads only once a minute, so a call made
// right after the kubelet rotated (and the server revoked) the old token fails for up to a minute,
// and TestTokenFileRotation shows this one picks the new token up on the next call with one stat.
type tokenFile struct {
	path  string
	mu    sync.Mutex
	token string
	mod   time.Time
	size  int64
}

func (t *tokenFile) read() (string, error) {
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("reading the API token: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && fi.ModTime().Equal(t.mod) && fi.Size() == t.size {
		return t.token, nil
	}
	data, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("reading the API token: %w", err)
	}
	token := string(bytes.TrimSpace(data))
	if token == "" {
		return "", fmt.Errorf("the API token file %s is empty", t.path)
	}
	t.token, t.mod, t.size = token, fi.ModTime(), fi.Size()
	return token, nil
}
