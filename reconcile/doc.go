// Package reconcile is the operator's engine: it makes the cluster and evalsid hold what each
// evals.si object says, and says in the object's status how far that is true.
//
// # The flow
//
// kinds (registry.go) is the table of what the engine can run: for each kind, its resource, the
// resources of its children, its finalizer and its reconcile function. Engine.Run discovers which
// of those resources the API server serves (again every discovery interval, so a CRD installed
// later starts its controller without a restart, and KEDA's arrival switches pools to
// autoscaling), reads the namespaces' project bindings (bindings.go), and starts a controller per
// served kind (controller.go): a dynamic shared informer, one rate-limited work queue keyed by
// namespace/name, and workers. Children are watched through the managed-by label and routed to
// their owner's queue by owner reference.
//
// A worker takes a key and reconcileKey reads the object from the informer's cache, then
// reconcileObject runs the checks every object meets (its project binding; for the kinds served
// by evalsid, the spec) and the kind's reconcile function. A reconcile function gathers its
// inputs (the rendering from package render, the live children from the caches, the server's
// answer) and returns an Outcome: the status it decided (statuses.go holds those decisions as pure
// functions), and when to look again. Errors say what happens next: a TerminalError (an invalid
// spec, a request the server refused) is recorded as Ready=False and Stalled and not retried until
// the object changes; any other error is retried with per-item backoff; a conflict is retried from
// the newer version the informer brings. reconcileKey then writes the status, only when its JSON
// differs from the object's, and records an Event only when Ready changed.
//
// Children are written with server-side apply under one field manager (apply.go), and only when
// they are stale: a child whose spec-hash annotation matches the rendering and whose fields the
// rendering sets are all still owned by the operator's apply (cachedchild.go) is left alone, so
// steady state makes no write at all, for any number of resyncs. The stale children of a reconcile
// are applied in two waves: ServiceAccounts, then the rest at once. The caches keep only what the
// engine reads: children as cachedChild, decoded straight from their watch (childwatch.go), and
// owners as their pruned JSON (cachedowner.go), of which each reconcile decodes its own copy.
// Writes are read at once, before the informer shows them (recentWrites, written.go),
// so a reconcile right after a write neither repeats nor conflicts with it; the informer event
// that brings the operator's own write back (the very version written) queues nothing, so a
// status write does not reconcile its object again. Nothing is kept in memory that matters
// across reconciles: a restart recomputes everything from the objects.
//
// Running EvalRuns are followed without an event from evalsid: every poll interval the run
// follower (runfollower.go) reads all their runs in batches, one call per project and 500 runs,
// and queues the EvalRuns whose run changed; each running EvalRun also comes back on its own a
// few intervals later and reads its run itself if the follower had nothing fresh, so a failed
// batch delays an update and never loses it.
//
// # Why not controller-runtime
//
// The engine is client-go's dynamic client, dynamic informers, workqueue, leader election and
// event recorder (children are watched over its REST client and decoded into what the cache keeps,
// childwatch.go), with unstructured objects throughout, as the platform's design asks: the evals.si
// specs are API messages kept as they are (no generated Go types), and the operator must run with
// an older evalsi-crds that lacks a kind, or without KEDA, and pick them up when they appear.
// controller-runtime's typed caches and static watches fit neither, and its per-reconcile
// apply-everything habit is what the steady-state rule forbids. What this package takes from the
// projects it learns from: sample-controller's worker loop (Done always, Forget on success,
// rate-limited requeue on error), kro's dynamic informers and status written only when changed,
// cert-manager's decisions apart from doing, crossplane's external API behind small idempotent
// calls with a per-reconcile timeout.
package reconcile
