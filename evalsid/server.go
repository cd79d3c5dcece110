// Package evalsid is a reference, in-memory implementation of the platform API server's
// RunService and MonitorService, with the semantics the operator relies on: idempotency keys,
// runs that move through their phases on a schedule, cancel that keeps results, global policy
// names owned by projects, bearer-token checks and authorization by project (authorize.go). Tests
// inject faults through Hook (package evalsidtest).
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
)

// Server is the reference evalsid.
type Server struct {
	mu sync.Mutex
	// tokens maps a bearer token to the identity it authenticates.
	tokens map[string]string
	runs   map[string]*run
	runsOf map[string]int // runs by project
	// monitorOf counts the policies and trace sources of each project.
	monitorOf map[string]int
	byKey     map[string]string // project/idempotency key -> run id
	policies  map[string]*policy
	sources   map[string]*traceSource
	queues    map[queueKey]uint32
	// maxTrials bounds the trials of one run (MaxTrialsPerRun; tests lower it).
	maxTrials int
	schedule  Schedule
	suites    map[string]bool // nil: any suite
	baseURL   string

	// kubernetes, when set, accepts the service-account tokens of a cluster besides tokens.
	kubernetes *KubernetesIssuer
	// dir, when set, tells the project each namespace acts in and which namespaces may use a
	// SandboxClass; without it a namespace acts in the project named like it (authorize.go).
	dir Directory
	// platform are identities trusted in every project (a cluster-wide operator).
	platform map[string]bool
	// queueReaders are identities that read every pool's queue depth and nothing else (KEDA's
	// own account, signing in for every namespace: TrustQueueReader).
	queueReaders map[string]bool
	// operatorNamespaces, when not nil, are the only namespaces whose evalsi-operator account is
	// an operator (SetOperatorNamespaces); nil trusts that account in every namespace.
	operatorNamespaces map[string]bool
	// sandboxNamespace is where SandboxClass pools run: its queue reader reads their queues.
	sandboxNamespace string

	// wrap and before are hooks in front of every call (Hook).
	wrap   func(http.Handler) http.Handler
	before func(method string) error
	calls  map[string]int
	log    callLog
}

// Limits of what one caller can make the server hold: a request body, and the objects of one
// project. Past them a request is refused (ResourceLimitExceeded over HTTP, ResourceExhausted),
// so that no caller can grow the server's memory without bound.
const (
	// MaxRequestBytes is the largest request body the server reads.
	MaxRequestBytes = 1 << 20
	// MaxObjectsPerProject bounds the runs, and the policies and trace sources, of one project.
	MaxObjectsPerProject = 100_000
	// callLogSize is how many calls CallLog keeps: the most recent ones.
	callLogSize = 10_000
)

// UnknownMethod is what the server counts a refused request under whose path names no method
// of its services.
const UnknownMethod = "(unknown)"

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
		tokens:       tokens,
		runs:         map[string]*run{},
		runsOf:       map[string]int{},
		monitorOf:    map[string]int{},
		byKey:        map[string]string{},
		policies:     map[string]*policy{},
		sources:      map[string]*traceSource{},
		queues:       map[queueKey]uint32{},
		maxTrials:    MaxTrialsPerRun,
		schedule:     schedule,
		calls:        map[string]int{},
		platform:     map[string]bool{},
		queueReaders: map[string]bool{},
		baseURL:      "https://evals.example",
		log:          callLog{max: callLogSize},
	}
}

// Handler returns the HTTP handler of the services, with authentication and fault injection.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	opts := connect.WithHandlerOptions(connect.WithInterceptors(s.interceptor()), connect.WithReadMaxBytes(MaxRequestBytes))
	mux.Handle(evalsiv1connect.NewRunServiceHandler(runService{s}, opts))
	mux.Handle(evalsiv1connect.NewMonitorServiceHandler(monitorService{s}, opts))
	mux.Handle(evalsiv1connect.NewQueueServiceHandler(queueService{s}, opts))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	h := limitBody(s.authenticate(mux))
	if s.wrap != nil {
		h = s.wrap(h)
	}
	return h
}

// limitBody refuses a request whose declared body is larger than MaxRequestBytes before reading
// it, and stops reading any body past that size (connect's read limit then refuses the call).
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxRequestBytes {
			http.Error(w, fmt.Sprintf("request body of %d bytes: at most %d", r.ContentLength, MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		next.ServeHTTP(w, r)
	})
}

// Serve serves the handler on l (HTTP/1.1 and h2c) until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return serve(ctx, l, s.Handler(), protocols)
}

// ServeTLS serves the handler over TLS on l until ctx ends. With cfg.ClientCAs set it is mutual
// TLS: every call needs a client certificate those CAs signed, of the identity of its bearer
// token; /healthz needs none, so that a kubelet's probe passes. cfg.GetConfigForClient, when
// set, gives each connection its CAs and certificate (read again as they rotate).
func (s *Server) ServeTLS(ctx context.Context, l net.Listener, cfg *tls.Config) error {
	cfg = cfg.Clone()
	h := s.Handler()
	if cfg.ClientCAs != nil {
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		h = requireClientCertificate(h)
	}
	cfg.NextProtos = []string{"h2", "http/1.1"}
	if get := cfg.GetConfigForClient; get != nil {
		// A configuration read again per connection (a rotated CA) keeps what is set here.
		cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := get(hello)
			if err != nil || c == nil {
				return c, err
			}
			c = c.Clone()
			c.ClientAuth, c.NextProtos = cfg.ClientAuth, cfg.NextProtos
			return c, nil
		}
	}
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
			c := Call{Method: method, Project: project, At: time.Now()}
			if err != nil {
				c.Code = connect.CodeOf(err)
			}
			s.log.add(c)
			s.mu.Unlock()
			return resp, err
		}
	}
}

func (s *Server) call(ctx context.Context, method string, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	if before := s.before; before != nil {
		if err := before(method); err != nil {
			return nil, err
		}
	}
	identity, ok := ctx.Value(identityKey{}).(string)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("a valid bearer token is required"))
	}
	c, err := s.authorize(identity, method, req.Any())
	if err != nil {
		return nil, err
	}
	return next(withCaller(ctx, c), req)
}

// identityKey holds, in a request's context, the identity its bearer token authenticated.
type identityKey struct{}

// authenticate verifies a request's bearer token before anything reads its body: a caller
// without a valid token gets Unauthenticated, and its message is never decoded. /healthz needs
// no token.
func (s *Server) authenticate(next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		identity, err := s.identify(r.Context(), r.Header.Get("Authorization"))
		if err == nil {
			err = sameIdentity(r.TLS, identity)
		}
		if err != nil {
			// Before authentication the path is the caller's to choose: it is counted under a
			// method the server has, or as unknownMethod, never under itself.
			method := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
			if _, known := methodRoles[method]; !known {
				method = UnknownMethod
			}
			s.mu.Lock()
			s.calls[method]++
			s.log.add(Call{Method: method, At: time.Now(), Code: connect.CodeUnauthenticated})
			s.mu.Unlock()
			errs.Write(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, identity)))
	})
}

// sameIdentity refuses a token presented with another identity's client certificate: over
// mutual TLS the verified certificate's common name must be the token's identity (a workload
// certificate of signer evalsi.WorkloadSigner names the pod's service account so, as the
// charts' certificate for the operator does). A stolen token is then of no use without the key
// of its pod, and a pod's certificate does not lend its identity to another's token.
func sameIdentity(state *tls.ConnectionState, identity string) error {
	if state == nil || len(state.VerifiedChains) == 0 {
		return nil
	}
	if name := state.VerifiedChains[0][0].Subject.CommonName; name != identity {
		return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("the client certificate names %q but the token %q: a token is accepted only beside a certificate of its own identity", name, identity))
	}
	return nil
}

// identify returns the identity a bearer token authenticates: one of the server's tokens, or a
// service-account token its Kubernetes issuer verifies.
func (s *Server) identify(ctx context.Context, authorization string) (string, error) {
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("a valid bearer token is required"))
	}
	s.mu.Lock()
	identity, known := s.tokens[token]
	issuer := s.kubernetes
	s.mu.Unlock()
	if known {
		return identity, nil
	}
	if issuer == nil {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("a valid bearer token is required"))
	}
	identity, err := issuer.Verify(ctx, token, time.Now())
	if err != nil {
		return "", connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("token refused: %w", err))
	}
	return identity, nil
}

// TrustKubernetes makes the server accept, besides its tokens, the service-account tokens that
// issuer verifies (the "kubernetes:" provider).
func (s *Server) TrustKubernetes(issuer *KubernetesIssuer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kubernetes = issuer
}

// SetDirectory makes the server read the project each namespace acts in, and the namespaces a
// SandboxClass admits, from d (WatchCluster). Without one, a namespace acts in the project named
// like it and classes are not checked.
func (s *Server) SetDirectory(d Directory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dir = d
}

// TrustPlatform makes identity a platform identity: it acts in every project, as a cluster-wide
// operator does, and may forward creators. Only the server's own configuration names these.
func (s *Server) TrustPlatform(identity string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.platform[identity] = true
}

// TrustQueueReader makes identity the platform's queue reader: it reads the queue depth of every
// pool, of every namespace and of the SandboxClasses, and calls nothing else. KEDA signs in as
// one account of its own namespace this way (its ClusterTriggerAuthentication), with a token
// and a certificate of that account, instead of one queue reader per team namespace.
func (s *Server) TrustQueueReader(identity string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queueReaders[identity] = true
}

// SetOperatorNamespaces names the namespaces where an evalsi-operator runs: only there is the
// account evalsi.OperatorServiceAccount an operator (it creates runs, writes policies and
// forwards creators). Anywhere else an account of that name is what any namespace editor could
// have made, and may do what a pool may. The evalsid command always sets them; a server never
// told trusts the account in every namespace.
func (s *Server) SetOperatorNamespaces(namespaces ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.operatorNamespaces = setOf(namespaces)
}

// SetSandboxNamespace names the namespace SandboxClass pools run in; its queue reader may read
// their queues.
func (s *Server) SetSandboxNamespace(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxNamespace = namespace
}

// Calls returns how many calls of method (such as "GetRun") the server answered.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// CallLog returns the calls so far, in order: the most recent callLogSize of them.
func (s *Server) CallLog() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.calls()
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

// Hook puts wrap in front of the server's HTTP handler and before in front of every call (its
// error fails the call), for a test's fault injection (package evalsidtest). Set before Handler.
func (s *Server) Hook(wrap func(http.Handler) http.Handler, before func(method string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrap, s.before = wrap, before
}

// callLog keeps the most recent calls, at most max: a ring, so that a long-running server's
// memory does not grow with every call it answers.
type callLog struct {
	max   int
	ring  []Call
	start int
}

func (l *callLog) add(c Call) {
	if len(l.ring) < l.max {
		l.ring = append(l.ring, c)
		return
	}
	l.ring[l.start] = c
	l.start = (l.start + 1) % l.max
}

func (l *callLog) calls() []Call {
	return append(append([]Call(nil), l.ring[l.start:]...), l.ring[:l.start]...)
}
