// Package evalsid is a reference, in-memory implementation of the platform API server's
// RunService and MonitorService, with the semantics the operator relies on: idempotency keys,
// runs that move through their phases on a schedule, cancel that keeps results, global policy
// names owned by projects, bearer-token checks, and fault injection for tests.
package evalsid

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"evals.si/operator/apiclient/evalsiv1/evalsiv1connect"
	"evals.si/operator/evalsi"
)

// Server is the reference evalsid.
type Server struct {
	mu sync.Mutex
	// tokens maps a bearer token to the identity it authenticates.
	tokens   map[string]string
	runs     map[string]*run
	byKey    map[string]string // project/idempotency key -> run id
	policies map[string]*policy
	sources  map[string]*traceSource
	queues   map[queueKey]uint32
	schedule Schedule
	suites   map[string]bool // nil: any suite
	nextID   int
	baseURL  string

	// kubernetes, when set, accepts the service-account tokens of a cluster besides tokens.
	kubernetes *KubernetesIssuer

	faults faults
	calls  map[string]int
	log    []Call
}

// Call is one request the server received, for tests to count and inspect.
type Call struct {
	Method string
	// Project is the project the request names.
	Project string
	At      time.Time
	Code    connect.Code // 0 when it succeeded
}

// Schedule is how long runs stay Pending and Running before they end, and how they end.
// A zero duration holds the run in that phase until SetPhase moves it.
type Schedule struct {
	Pending, Running time.Duration
	// Fail ends runs Failed instead of Succeeded.
	Fail bool
	// Summary is the summary of runs that end.
	Summary Summary
}

// Summary mirrors the run summary, without the protobuf type.
type Summary struct {
	Total, Passed, Failed, Errored int64
	Score                          float64
}

// DefaultSchedule moves runs along quickly, for `dev`.
var DefaultSchedule = Schedule{
	Pending: 2 * time.Second, Running: 8 * time.Second,
	Summary: Summary{Total: 50, Passed: 44, Failed: 5, Errored: 1, Score: 0.88},
}

// New returns a server that accepts the given tokens (token -> identity) and moves runs on
// schedule. Runs' URLs start with baseURL.
func New(tokens map[string]string, schedule Schedule) *Server {
	return &Server{
		tokens:   tokens,
		runs:     map[string]*run{},
		byKey:    map[string]string{},
		policies: map[string]*policy{},
		sources:  map[string]*traceSource{},
		queues:   map[queueKey]uint32{},
		schedule: schedule,
		calls:    map[string]int{},
		baseURL:  "https://evals.example",
	}
}

// Handler returns the HTTP handler of the services, with authentication and fault injection.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	opts := connect.WithInterceptors(s.interceptor())
	mux.Handle(evalsiv1connect.NewRunServiceHandler(runService{s}, opts))
	mux.Handle(evalsiv1connect.NewMonitorServiceHandler(monitorService{s}, opts))
	mux.Handle(evalsiv1connect.NewQueueServiceHandler(queueService{s}, opts))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return s.faults.wrap(mux)
}

// Serve serves the handler on l (HTTP/1.1 and h2c) until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return serve(ctx, l, s.Handler(), protocols)
}

// ServeTLS serves the handler over TLS on l until ctx ends. With cfg.ClientCAs set it is mutual
// TLS: every call needs a client certificate those CAs signed, besides its bearer token; /healthz
// needs none, so that a kubelet's probe passes.
func (s *Server) ServeTLS(ctx context.Context, l net.Listener, cfg *tls.Config) error {
	cfg = cfg.Clone()
	h := s.Handler()
	if cfg.ClientCAs != nil {
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		h = requireClientCertificate(h)
	}
	cfg.NextProtos = []string{"h2", "http/1.1"}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	return serve(ctx, tls.NewListener(l, cfg), h, protocols)
}

// requireClientCertificate refuses calls without a verified client certificate, except /healthz.
func requireClientCertificate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			http.Error(w, "a client certificate is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func serve(ctx context.Context, l net.Listener, h http.Handler, protocols *http.Protocols) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, Protocols: protocols}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// interceptor checks the bearer token, counts calls and applies injected failures.
func (s *Server) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			method := req.Spec().Procedure[strings.LastIndex(req.Spec().Procedure, "/")+1:]
			resp, err := s.call(ctx, method, req, next)
			s.mu.Lock()
			s.calls[method]++
			var project string
			if m, ok := req.Any().(interface{ GetProject() string }); ok {
				project = m.GetProject()
			}
			s.log = append(s.log, Call{Method: method, Project: project, At: time.Now(), Code: connect.CodeOf(err)})
			if err == nil {
				s.log[len(s.log)-1].Code = 0
			}
			s.mu.Unlock()
			return resp, err
		}
	}
}

func (s *Server) call(ctx context.Context, method string, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	if err := s.faults.take(method); err != nil {
		return nil, err
	}
	token, ok := strings.CutPrefix(req.Header().Get("Authorization"), "Bearer ")
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("a valid bearer token is required"))
	}
	s.mu.Lock()
	identity, known := s.tokens[token]
	issuer := s.kubernetes
	s.mu.Unlock()
	if !known && issuer != nil {
		var err error
		if identity, err = issuer.Verify(ctx, token, time.Now()); err != nil {
			return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("token refused: %w", err))
		}
		known = true
	}
	if !known {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("a valid bearer token is required"))
	}
	if strings.HasSuffix(identity, ":"+evalsi.QueueReaderServiceAccount) && method != "GetQueueDepth" {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s only reads queues", identity))
	}
	return next(withIdentity(ctx, identity), req)
}

// TrustKubernetes makes the server accept, besides its tokens, the service-account tokens that
// issuer verifies (the "kubernetes:" provider).
func (s *Server) TrustKubernetes(issuer *KubernetesIssuer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kubernetes = issuer
}

// Calls returns how many calls of method (such as "GetRun") the server answered.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// CallLog returns every call so far, in order.
func (s *Server) CallLog() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.log...)
}

// SetToken accepts token as identity (a rotated token).
func (s *Server) SetToken(token, identity string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = identity
}

// RevokeToken stops accepting token.
func (s *Server) RevokeToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, token)
}

// FailNext makes the next n calls fail with code.
func (s *Server) FailNext(n int, code connect.Code) { s.faults.failNext(n, code) }

// SetLatency delays every call by d.
func (s *Server) SetLatency(d time.Duration) { s.faults.setLatency(d) }

// Refuse makes every call of method (such as "BatchGetRuns") fail with code; code 0 answers
// them again.
func (s *Server) Refuse(method string, code connect.Code) { s.faults.refuse(method, code) }

// SetDown makes the server stop answering (connections are closed) or answer again.
func (s *Server) SetDown(down bool) { s.faults.setDown(down) }

type identityKey struct{}

func withIdentity(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// identityOf returns the authenticated caller.
func identityOf(ctx context.Context) string {
	id, _ := ctx.Value(identityKey{}).(string)
	return id
}
