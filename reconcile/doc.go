// Package reconcile is the operator: it makes the cluster and evalsid hold what each evals.si
// object says, and says in the object's status how far that is true. It composes the parts
// below (operator.go): the kinds, registered with one engine, run in one process.
//
// # Where things live
//
//	reconcile/           the composition: Config, New (the kinds and the engine), RunManager,
//	                     and the engine's Tenancy (the project of each object, read through
//	                     internal/tenancy, as the webhook and evalsid read it)
//	reconcile/engine     kind-neutral: discovery, informers and caches, queues and workers,
//	                     SyncChildren (server-side apply, drift, deletion), the status writer,
//	                     Managed (the finalizer lifecycle of objects kept in an external API),
//	                     metrics; it names no evals.si kind
//	reconcile/workloads  Evaluator, SandboxClass, CheckpointServer: rendered into children
//	reconcile/runs       EvalRun: a run in evalsid, and the follower of running runs
//	reconcile/monitors   OnlineEvalPolicy, TraceSource: objects kept in evalsid's MonitorService
//	reconcile/apicall    evalsid's failures as conditions and retries (runs, monitors)
//	reconcile/process    /healthz, /readyz, /metrics and its authentication, leader election
//
// Imports run one way: the composition imports the kinds, the kinds import engine and apicall,
// and nothing imports back up.
//
// # The flow of one object
//
// Engine.Run discovers which resources of the selected kinds and their children are served
// (again every discovery interval: a CRD installed later starts its controller, KEDA's arrival
// switches pools to autoscaling), and starts a Controller per served kind: an informer of its
// objects, informers of its children (by the managed-by label), both decoded straight from the
// API server's JSON into what the cache keeps, a rate-limited work queue and workers. An
// operator with shards runs an Engine per shard it holds, whose informers hold only that shard's
// objects (package shard, reconcile/process/shards.go), and whose writes, to the API server (its
// Events too) and to evalsid (apicall.FenceCalls), are sent only within the shard's tenure
// (shard.Tenure: a renew deadline after the last renewal of its Lease that the API server
// accepted), so that a replica resumed after a pause writes nothing of a shard another replica
// took meanwhile. A worker takes a key and
// Controller.reconcileKey reads the object from the cache; reconcileObject checks its project
// once (Config.Tenancy; an object that may not act there makes no call and no child:
// ProjectNotAllowed), checks its spec once a generation (Kind.Validate), and calls the kind's
// Reconciler with a Request: the object, its project, and what was refused for its generation.
//
// A kind's Reconciler gathers its inputs (the rendering from package render, the live children
// from the caches, the server's answer), decides the status with a pure function that a table
// test holds, and acts through the engine: Controller.SyncChildren applies the children that are
// missing, changed or drifted (nothing at steady state), or engine.Managed runs the kind's
// External (Observe, Create, Update, Delete against evalsid) under its finalizer. It returns an
// Outcome: what it says of the status, and when to look again.
//
// The engine merges that into the status (fields by name, conditions by type; a TerminalError
// adds Ready=False and Stalled and records what was refused, which no kind tries again for the
// same generation), writes it only when it changed, and records an Event only when Ready did.
// Errors decide the retry: terminal ones wait for a new spec, Away ones (evalsid not there) are
// requeued all at once when evalsid answers again, others back off per object.
//
// # Adding a kind
//
// One row in the vocabulary's table (evalsi.Kinds: kind, resource, scope, controller name,
// whether it renders pods, the proto message of its spec) is read by the schemas, render's name
// rules, the webhook's rules, make dev's table, the CRDs' spec descriptions, the charts' lists of
// kinds and the test that keeps the engine neutral. Adding a kind touches these nine files
// (evalsi/TestAddingAKindTouchesTheListedFiles holds every hand-written file that names each
// kind to this list, and counts it):
//   - evalsi/evalsi.go: its resource;
//   - evalsi/kinds.go: its row;
//   - schemas/<kind>.json: its spec's schema (the file the row names);
//   - render/<kind>.go: its spec's Go type, decoding and renderer (render/apispecs.go for a kind
//     kept in evalsid);
//   - render/render.go: its renderer among the renderers, held to the table by
//     TestEveryKindRenders;
//   - reconcile/<package>/<kind>.go: the function that returns its engine.Kind (engine.NewKind
//     of its row, with children, finalizer, Validate and Reconciler), in a package beside
//     workloads, runs and monitors; its Reconciler renders bare children, which SyncChildren
//     stamps (engine.StampChild);
//   - reconcile/operator.go: that function among the operator's kinds;
//   - chart/evalsi-crds/files/crds/<resource>.yaml: its CRD, whose spec schema `make golden`
//     writes from the JSON schema (internal/crdschema);
//   - chart/evalsi/values.yaml: its controller among the defaults, for a namespaced kind.
//
// Beside them: its golden files, which `make golden` writes, as it writes each chart's
// files/kinds.yaml, over which every other list of kinds in the charts ranges (the webhook's
// rules, the creator policy, the aggregated and per-kind roles, the binder, the uninstall hook;
// TestChartsListEveryKind reads the rendered lists back); and, for a kind kept in evalsid, its
// proto message and evalsid's service, which are the platform API's change, not the operator's.
//
// The engine needs nothing else: reconcile/engine/toykind_test.go adds one, a Greeting that
// renders a bare ConfigMap, in one file, and runs it on one shard of two.
//
// # Why not controller-runtime
//
// The engine is client-go's dynamic client, informers, workqueue, leader election and event
// recorder (objects are watched over the dynamic client's REST client and decoded into what the
// cache keeps), with unstructured objects throughout, as the platform's design asks: the evals.si specs
// are API messages kept as they are (no generated Go types), and the operator must run with an
// older evalsi-crds that lacks a kind, or without KEDA, and pick them up when they appear.
// controller-runtime's typed caches and static watches fit neither, and its per-reconcile
// apply-everything habit is what the steady-state rule forbids. What the engine takes from the
// projects it learns from: sample-controller's worker loop (Done always, Forget on success,
// rate-limited requeue on error), kro's dynamic informers and status written only when changed,
// cert-manager's decisions apart from doing, crossplane's external API behind small idempotent
// calls (External, Managed) with a per-reconcile timeout.
package reconcile
