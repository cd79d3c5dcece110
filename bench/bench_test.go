// Package bench measures evalsi-operator side by side with the operator a user would otherwise
// write: a controller-runtime controller (bench/peer, its own module) doing the same job with the
// same render package. Both run as processes, in alternating rounds, on one control plane, as one
// service account; the API server's audit log counts what each wrote, /proc their CPU and peak
// memory, their heap profiles their live heap. `make bench` runs it.
package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
)

var (
	rounds = flag.Int("rounds", 4, "rounds of each contender at each size: an even number, so that each goes first as often")
	sizes  = flag.String("sizes", "500,2000", "numbers of Evaluators, comma-separated")
	idle   = flag.Duration("idle", time.Minute, "how long converged objects are watched for writes")
	only   = flag.String("only", "", "run only this contender (operator or peer), to profile it; no comparison or table")
	limit  = flag.Duration("wait", 10*time.Minute, "how long a contender may take for each step a round waits for (converging, Ready, reconciling after a restart); at 10,000 Evaluators without pods the controller-runtime peer took 7.3 minutes to converge and 6.5 to reconcile after its restart, too close to the default")
	pods   = flag.Bool("pods", true, "let the pools run pods (false: no ReplicaSet controller runs, so no pod is asked for, for sizes whose pods this machine cannot make in time, 10,000: converging, memory, idle and restart are measured, Ready and its Events are not)")
	// Profiles of the contenders from the first create on, for `go tool pprof`.
	profiles       = flag.String("profiles", "", "directory to write each round's CPU profile and steady-state heap profile of the contender into (none when empty); BenchmarkShards writes each replica's CPU profile of its churn, of a minute idle after it, and its heap")
	profileSeconds = flag.Int("profile-seconds", 30, "length of each CPU profile")
)

// The rendering settings both contenders get, and the service account they run as.
const (
	image               = "evalsi/platform:bench"
	apiURL              = "http://evalsid.evalsi.svc:8080"
	controllerNamespace = "evalsi-bench"
	controllerAccount   = "controller"
	creators            = 16 // concurrent users creating Evaluators
)

var env *cluster.Cluster

// shared is the benchmark's control plane: enough KWOK nodes for a pod per Evaluator (up to
// 12,000), an audit log of the controllers' writes, and the API server's shardSelector
// (BenchmarkShards; alpha in 1.37, off by default). With -pods=false no ReplicaSet controller
// runs, so no pod is asked for. It is made once the flags are parsed.
var shared *clustertest.Shared

func TestMain(m *testing.M) {
	flag.Parse()
	shared = clustertest.New(cluster.Options{
		Nodes:              4,
		NodeCapacity:       map[string]string{"pods": "3000"},
		CRDDirs:            []string{"../chart/evalsi-crds/files/crds"},
		AuditPolicy:        auditPolicy,
		FeatureGates:       []string{"ShardedListAndWatch=true"},
		WithoutReplicaSets: !*pods,
	})
	os.Exit(shared.Main(m))
}

// setup starts the control plane, KEDA's CRDs (KEDA itself is not run: a pool's Deployment
// keeps its one default replica, a pod KWOK runs) and the controllers' service account, bound
// to cluster-admin.
func setup(b testing.TB, ctx context.Context) {
	env = shared.Get(b)
	if err := env.InstallKedaCRDs(ctx); err != nil {
		b.Fatal(err)
	}
	apply := func(gvr schema.GroupVersionResource, obj map[string]any) {
		u := &unstructured.Unstructured{Object: obj}
		_, err := env.Dynamic().Resource(gvr).Namespace(u.GetNamespace()).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "bench"})
		if err != nil {
			b.Fatal(err)
		}
	}
	apply(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": controllerNamespace}})
	apply(evalsi.ServiceAccounts, map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": controllerAccount, "namespace": controllerNamespace}})
	apply(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": "evalsi-bench-controller"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": controllerAccount, "namespace": controllerNamespace}}})
}

// BenchmarkOperatorVsPeer runs, at each size, rounds of evalsi-operator and the controller-runtime
// peer, each alone on the control plane, an even number of them with each going first in half,
// and prints the comparison table.
func BenchmarkOperatorVsPeer(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	setup(b, ctx)
	cs := contenders(b)
	if *only != "" {
		cs = slices.DeleteFunc(cs, func(c contender) bool { return c.short != *only })
		if len(cs) == 0 {
			b.Fatalf("-only: no contender %q (operator or peer)", *only)
		}
	}
	if len(cs) == 2 && *rounds%2 == 1 {
		b.Fatalf("-rounds=%d: give an even number, so that each contender goes first in as many rounds", *rounds)
	}
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			b.Fatalf("-sizes: %q is not a number of Evaluators", s)
		}
		ns = append(ns, n)
	}
	for range b.N {
		results := map[int]map[string][]roundResult{}
		for _, n := range ns {
			results[n] = map[string][]roundResult{}
			for r := range *rounds {
				// Alternate who goes first, so that neither always follows the other's cleanup.
				order := slices.Clone(cs)
				if r%2 == 1 {
					slices.Reverse(order)
				}
				// Each contender alone on the control plane: its namespace, with its objects and
				// their pods, is deleted before the other starts. The first round keeps what each
				// made, to compare.
				var made []map[string]any
				for _, c := range order {
					res, namespace := runRound(b, ctx, c, n, r)
					results[n][c.name] = append(results[n][c.name], res)
					fmt.Fprintf(os.Stderr, "%d Evaluators, round %d, %s: %s\n", n, r+1, c.name, res)
					if r == 0 {
						made = append(made, outputs(b, ctx, namespace))
					}
					deleteNamespace(b, ctx, namespace, 10*time.Minute)
				}
				if len(made) == 2 {
					// Both made the same children and statuses, or the comparison means nothing.
					if diff := cmp.Diff(made[0], made[1]); diff != "" {
						b.Fatalf("%s and %s produced different children or statuses (-%s +%s):\n%s",
							order[0].name, order[1].name, order[0].name, order[1].name, diff)
					}
				}
			}
		}
		if len(cs) == 2 {
			fmt.Print(table(ns, cs, results))
		}
	}
}

// benchClient is the creators' client: a user's, not limited by the contenders' budget.
func benchClient(b testing.TB) dynamic.Interface {
	rc := rest.CopyConfig(env.Config)
	rc.QPS, rc.Burst = 1000, 2000
	c, err := dynamic.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// evaluator is the i-th Evaluator of a round: an autoscaled pool.
func evaluator(ns string, i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
		"metadata": map[string]any{"name": fmt.Sprintf("pool-%04d", i), "namespace": ns},
		"spec": map[string]any{
			"autoscaling": map[string]any{"minReplicas": int64(0), "maxReplicas": int64(10), "targetQueueDepth": int64(5)},
		},
	}}
}
