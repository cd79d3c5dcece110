package evalsid

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsi"
)

// The platform's contract for who may do what at evalsid (docs/design.md, "Identities at
// evalsid"). A caller is a service account, system:serviceaccount:<namespace>:<name>, and acts
// only in the project its namespace acts in (evalsi.ProjectOf: the namespace's binding label, else
// its name), whatever project its requests name. What it may call depends on which account it is:
//
//   - the operator (evalsi.OperatorServiceAccount, in a namespace where the server knows an
//     operator runs: SetOperatorNamespaces) writes and reads the runs of its own namespace and
//     the policies and trace sources of its namespace's objects, and is the one caller whose
//     forwarded creator is recorded; an account of that name
//     elsewhere, which a namespace editor can make, may do what a pool may;
//   - the queue reader (evalsi.QueueReaderServiceAccount), which KEDA signs in as, reads queue
//     depths and nothing else; a SandboxClass's queue (no project) only from the sandbox namespace;
//   - the platform's queue reader (TrustQueueReader), KEDA's one account for every namespace,
//     reads every pool's queue depth and nothing else;
//   - any other service account is a pool's, and reads the runs of its own namespace (work is
//     dispatched per namespace: a run is worked only by the pools of the namespace it was made in)
//     and hands their trials to the SandboxClasses that admit its namespace;
//   - an identity the server's operator names as a platform identity (a cluster-wide operator)
//     acts in every project, as an operator does in one.
//
// Any other identity acts nowhere.

// role is what kind of caller an identity is.
type role int

const (
	roleNone role = iota
	rolePool
	roleNamesake
	roleQueueReader
	roleClusterQueueReader
	roleOperator
	rolePlatform
)

func (r role) String() string {
	return [...]string{"no role", "a pool", "an account named like the operator in a namespace where no operator runs (evalsid's --operator-namespace), which may do what a pool may",
		"the queue reader", "the platform's queue reader", "the operator", "a platform identity"}[r]
}

// methodRoles are the roles that may call each method.
var methodRoles = map[string][]role{
	"CreateRun":         {roleOperator, rolePlatform},
	"CancelRun":         {roleOperator, rolePlatform},
	"GetRun":            {roleOperator, rolePlatform, rolePool, roleNamesake},
	"BatchGetRuns":      {roleOperator, rolePlatform, rolePool, roleNamesake},
	"PutPolicy":         {roleOperator, rolePlatform},
	"GetPolicy":         {roleOperator, rolePlatform},
	"DeletePolicy":      {roleOperator, rolePlatform},
	"PutTraceSource":    {roleOperator, rolePlatform},
	"GetTraceSource":    {roleOperator, rolePlatform},
	"DeleteTraceSource": {roleOperator, rolePlatform},
	"GetQueueDepth":     {roleQueueReader, roleClusterQueueReader, rolePlatform},
	"EnqueueTrial":      {rolePool, roleNamesake, rolePlatform},
}

// Directory is what evalsid reads from the cluster to authorize: the project a namespace acts
// in, and whether a namespace may use a SandboxClass. WatchCluster is the Kubernetes one.
type Directory interface {
	// Project returns the project namespace acts in, or an error when it cannot be known yet.
	Project(namespace string) (string, error)
	// MayUseClass reports whether namespace may use the SandboxClass class (its
	// spec.allowedNamespaces selects the namespace), or an error when that cannot be known.
	MayUseClass(namespace, class string) (bool, error)
}

// caller is an authenticated, authorized identity.
type caller struct {
	identity  string
	role      role
	namespace string // "" for a platform identity
}

// trusted reports whether the caller may forward the creator of what it writes.
func (c caller) trusted() bool { return c.role == roleOperator || c.role == rolePlatform }

// roleOf returns the role of identity and the namespace it belongs to.
func (s *Server) roleOf(identity string) (role, string) {
	if s.platform[identity] {
		return rolePlatform, ""
	}
	if s.queueReaders[identity] {
		return roleClusterQueueReader, ""
	}
	ns, name, ok := evalsi.ParseServiceAccountIdentity(identity)
	if !ok {
		return roleNone, ""
	}
	switch name {
	case evalsi.OperatorServiceAccount:
		if s.operatorNamespaces != nil && !s.operatorNamespaces[ns] {
			return roleNamesake, ns
		}
		return roleOperator, ns
	case evalsi.QueueReaderServiceAccount:
		return roleQueueReader, ns
	}
	return rolePool, ns
}

// projectOf returns the project namespace acts in: from dir when the server has one, else the
// project named like the namespace.
func projectOf(dir Directory, namespace string) (string, error) {
	if dir == nil {
		return namespace, nil
	}
	return dir.Project(namespace)
}

// authorize decides whether identity may call method with msg: PermissionDenied for a method its
// role may not call or a project it does not act in, Unavailable while the bindings are not known.
// It holds the server's lock only to read its configuration: the directory may read a namespace
// its cache lacks from the API server, which must not hold every other caller's call.
func (s *Server) authorize(identity, method string, msg any) (caller, error) {
	s.mu.Lock()
	r, ns := s.roleOf(identity)
	sandboxNamespace, dir := s.sandboxNamespace, s.dir
	s.mu.Unlock()
	c := caller{identity: identity, role: r, namespace: ns}
	if !slices.Contains(methodRoles[method], r) {
		return c, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s is %s, which may not call %s", identity, r, method))
	}
	if r == rolePlatform || r == roleClusterQueueReader {
		return c, nil // every project; roleClusterQueueReader calls GetQueueDepth alone
	}
	var requested string
	if m, ok := msg.(interface{ GetProject() string }); ok {
		requested = m.GetProject()
	}
	if q, ok := msg.(*v1.GetQueueDepthRequest); ok && q.Kind == v1.PoolKind_POOL_KIND_SANDBOX {
		// A SandboxClass's pool serves every project; its queue is read from where it runs.
		if sandboxNamespace == "" || ns != sandboxNamespace {
			return c, connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("%s may not read the queues of SandboxClass pools: only the queue reader of the sandbox namespace may", identity))
		}
		return c, nil
	}
	if q, ok := msg.(*v1.GetQueueDepthRequest); ok && q.Namespace != ns {
		// A queue reader reads the queues of its own namespace's pools, no other namespace's
		// of the same project: work is dispatched per namespace.
		return c, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s may read the queues of namespace %s, not %q", identity, ns, q.Namespace))
	}
	project, err := projectOf(dir, ns)
	if errors.Is(err, ErrNotKnownYet) {
		return c, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the project of namespace %s: %w", ns, err))
	}
	if err != nil {
		return c, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s acts in no project: %w", identity, err))
	}
	if requested != project {
		return c, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s acts in project %q (namespace %s), not %q", identity, project, ns, requested))
	}
	if m, ok := msg.(interface{ GetOwner() string }); ok && !strings.HasPrefix(method, "Get") {
		return c, c.mayOwn(m.GetOwner())
	}
	return c, nil
}

// creator is who a write is recorded as made for: the creator a trusted caller forwards, else
// the caller itself. A pool or any other caller cannot credit its writes to someone else.
func (c caller) creator(forwarded string) string {
	if c.trusted() && forwarded != "" {
		return forwarded
	}
	return c.identity
}

// runNamespace is the namespace a run the caller creates is made in: the one a platform identity
// names, else the caller's own, whatever the request says.
func (c caller) runNamespace(requested string) string {
	if c.role == rolePlatform {
		return requested
	}
	return c.namespace
}

// mayRead reports whether the caller may read, and so cancel or work, run: a platform identity
// every run of every project; anyone else, the operator included, only the runs of its own
// namespace. Another namespace bound to the same project has its own operator: a dev namespace's
// editor who runs a pod as its operator account reaches no run of prod.
func (c caller) mayRead(run *v1.Run) bool {
	return c.role == rolePlatform || run.Namespace == c.namespace
}

// mayOwn checks the owner a namespaced operator names in a put or delete of a policy or trace
// source: an object of its own namespace (<namespace>/<name>). It may not write as the CLI does,
// with no owner, which changes what any owner holds.
func (c caller) mayOwn(owner string) error {
	if c.role != roleOperator {
		return nil
	}
	if ns, _, ok := strings.Cut(owner, "/"); !ok || ns != c.namespace {
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("owner: %s writes policies and trace sources only for objects of namespace %s, not %q", c.identity, c.namespace, owner))
	}
	return nil
}

// mayUseClass checks that a run in namespace may use the SandboxClass class: PermissionDenied when
// the class does not admit it. Without a directory (no cluster), classes are not checked.
func (s *Server) mayUseClass(namespace, class string) error {
	if class == "" || s.dir == nil {
		return nil
	}
	ok, err := s.dir.MayUseClass(namespace, class)
	switch {
	case errors.Is(err, ErrNotKnownYet):
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("spec.sandboxClass: %w", err))
	case err != nil:
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("spec.sandboxClass: %w", err))
	case !ok:
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("spec.sandboxClass: SandboxClass %s does not admit namespace %s (its spec.allowedNamespaces)", class, namespace))
	}
	return nil
}

type callerKey struct{}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerOf returns the authorized caller of a request.
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}
