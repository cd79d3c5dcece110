package devenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"evals.si/operator/apiclient"
	"evals.si/operator/cluster"
	"evals.si/operator/cmd/evalsi-release/release"
	"evals.si/operator/evalsi"
	"evals.si/operator/evalsid"
	"evals.si/operator/internal/checkout"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/reconcile"
	"evals.si/operator/render"
)

// devToken is the token the operator of a development session uses against the reference
// evalsid, as devOperatorIdentity.
const (
	devToken            = "dev-operator-token"
	devOperatorIdentity = "system:serviceaccount:evalsi:evalsi-operator"
)

// Options are the settings of a development session.
type Options struct {
	Render render.Options
	GPUs   string
	KEDA   bool
	// Existing, when set, is a cluster to run against instead of starting one (installer.go).
	Existing *Target
	// RealNode, when set, runs the examples' pods in containers on a real node (realnode.go).
	RealNode *RealNode
}

// Target is an existing cluster: a kubeconfig file (the default loading rules when empty) and a
// context in it (its current one when empty).
type Target struct{ Kubeconfig, Context string }

// Run starts a control plane with a GPU node (or uses opts.Existing), installs the CRDs (and
// KEDA's), runs the admission webhook, serves the reference evalsid, runs the operator, applies
// the examples, and prints a table of the evals.si resources whenever it changes, until ctx ends.
// It reads the CRDs, the chart's policies and the examples from the checkout (checkout.Root). On an existing cluster it removes at the end what it created.
func Run(ctx context.Context, opts Options, out io.Writer) error {
	root, err := checkout.Root()
	if err != nil {
		return err
	}
	out = &lockedWriter{w: out} // the builds below report side by side
	// The control plane's build makes helm too, which renders the admission policies below.
	c, err := devCluster(ctx, opts, out)
	if err != nil {
		return err
	}
	defer c.Stop()
	in := &installer{client: c.Dynamic(), existing: opts.Existing != nil, out: out}
	// What reaches the session from outside it, and where its files are seen.
	kubeconfig, logDir, apiHost := c.Kubeconfig, c.Dir, "127.0.0.1"
	// The servers run until what the session made is removed (their finalizers need the
	// operator), not until ctx ends.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		in.remove(cleanup, stopRun)
	}()

	crds, err := readDocuments(root, "chart/evalsi-crds/files/crds/*.yaml")
	if err != nil {
		return err
	}
	if err := installCRDs(ctx, c, in, objects(crds)); err != nil {
		return err
	}
	if opts.KEDA {
		keda, err := cluster.KedaCRDs(ctx)
		if err != nil {
			return err
		}
		if err := installCRDs(ctx, c, in, keda); err != nil {
			return err
		}
	}

	// Admission as a real install has it: what kubectl apply is refused, it is refused here.
	webhookErr, err := startDevAdmission(ctx, runCtx, c, in, opts.Render.Limits, out)
	if err != nil {
		return err
	}
	if err := applyDevPolicies(ctx, c, in, root, out); err != nil {
		return err
	}

	if n := opts.RealNode; n != nil {
		if kubeconfig, err = writeHostKubeconfig(c, n.Dir, n.Host.Addr()); err != nil {
			return err
		}
		logDir, apiHost = n.Dir, c.Node.IP
		go func() {
			if err := forwardToAPIServer(runCtx, n.Host, c.Config.Host); err != nil {
				fmt.Fprintln(out, "the host's port to the API server stopped (kubectl in another shell no longer reaches it):", err)
			}
		}()
		fmt.Fprintln(out, "pushing the images of make images to the node's registry")
		images, err := release.PushArchives(ctx, root, c.Node.Registry+"/evalsi")
		if err != nil {
			return err
		}
		opts.Render.DefaultImage, opts.Render.VLLMImage = images.PoolImage(), images.ModelImage()
	}

	// The reference evalsid (on loopback, or on the real node's address for its pods), and the
	// operator's token for it. Pool pods sign in with their projected tokens.
	// The operator of dev acts in every namespace's project, as a platform identity; evalsid reads
	// the projects' bindings and the SandboxClasses from the cluster, as the platform's does.
	api := evalsid.New(map[string]string{devToken: devOperatorIdentity}, evalsid.DefaultSchedule)
	api.TrustPlatform(devOperatorIdentity)
	api.SetOperatorNamespaces() // as the evalsid command: no namespace runs an operator of its own
	dir, err := evalsid.WatchCluster(runCtx, c.Config, "")
	if err != nil {
		return err
	}
	api.SetDirectory(dir)
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		return err
	}
	api.TrustKubernetes(&evalsid.KubernetesIssuer{APIServer: c.Config.Host, Client: hc, Audience: evalsi.DefaultTokenAudience,
		Bound: evalsid.NewLiveObjects(c.Clientset(), evalsid.BoundObjectsTTL)})
	apiListener, err := net.Listen("tcp", net.JoinHostPort(apiHost, "0"))
	if err != nil {
		return err
	}
	apiErr := make(chan error, 1)
	go func() { apiErr <- api.Serve(runCtx, apiListener) }()
	tokenFile := filepath.Join(c.Dir, "evalsid-token")
	if err := os.WriteFile(tokenFile, []byte(devToken+"\n"), 0o600); err != nil {
		return err
	}
	apiURL := "http://" + apiListener.Addr().String()
	opts.Render.APIURL = apiURL
	if err := render.CheckAPIEgress(opts.Render); err != nil {
		return fmt.Errorf("the pools' egress to the session's evalsid: %w", err)
	}
	fmt.Fprintf(out, "evalsid (reference) serving on %s: it runs no evaluator, so every run's result is SIMULATED (made up, marked so in its status)\n", apiURL)

	logPath := filepath.Join(logDir, "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	opErr := make(chan error, 1)
	go func() {
		opErr <- reconcile.RunManager(runCtx, reconcile.ManagerConfig{Engine: reconcile.Config{
			Rest:              c.Config,
			DiscoveryInterval: 5 * time.Second,
			Render:            opts.Render,
			API:               apiclient.Options{URL: apiURL, TokenFile: tokenFile},
			RunPollInterval:   2 * time.Second,
			Log:               slog.New(slog.NewTextHandler(logFile, nil)),
		}})
	}()

	examples, err := readDocuments(root, "testdata/examples/*.yaml")
	if err != nil {
		return err
	}
	if err := applyAll(ctx, c, in, examples); err != nil {
		return err
	}
	stops := "Ctrl-C stops everything."
	if in.existing {
		stops = "Ctrl-C stops it and removes what it created."
	}
	fmt.Fprintf(out, "\nthe operator runs; its log: %s\nin another shell:\n  export KUBECONFIG=%s\n  kubectl get evalsi -A\n%s\n\n", logPath, kubeconfig, stops)

	// On a real node, the pods of the examples' namespaces and of the sandbox pools' are shown too.
	var podNamespaces []string
	if opts.RealNode != nil {
		podNamespaces = append(namespaces(examples), opts.Render.SandboxNamespace)
	}
	last := ""
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		table, err := sessionTable(ctx, c, podNamespaces)
		if err == nil {
			if table != last {
				fmt.Fprintf(out, "%s\n%s", time.Now().Format("15:04:05"), table)
				last = table
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-opErr:
			return fmt.Errorf("operator stopped: %w", err)
		case err := <-webhookErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("the admission webhook stopped: %v", err)
		case err := <-apiErr:
			if ctx.Err() != nil {
				return nil // stopped with everything else
			}
			return fmt.Errorf("evalsid stopped: %v", err)
		case <-t.C:
		}
	}
}

// namespaces are the namespaces docs are in, sorted, each once.
func namespaces(docs []manifest.Document) []string {
	var out []string
	for _, d := range docs {
		if ns := d.Object.GetNamespace(); ns != "" && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

func objects(docs []manifest.Document) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(docs))
	for i, d := range docs {
		out[i] = d.Object
	}
	return out
}

// devCluster starts the session's control plane, or attaches to opts.Existing.
func devCluster(ctx context.Context, opts Options, out io.Writer) (*cluster.Cluster, error) {
	if t := opts.Existing; t != nil {
		c, err := cluster.Attach(t.Kubeconfig, t.Context)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "using the existing cluster at %s: what is missing is created, and removed at the end\n", c.Config.Host)
		return c, nil
	}
	fmt.Fprintln(out, "starting a local control plane (the first run builds it, with a line every 30 s)")
	if opts.RealNode != nil {
		fmt.Fprintf(out, "pods run in containers on a real node; a pod this machine cannot hold (a GPU, more CPU than it has) goes to a KWOK node, simulated\n")
		return cluster.Start(ctx, cluster.Options{
			RealNode:       true,
			Nodes:          1,
			NodeCapacity:   map[string]string{"nvidia.com/gpu": opts.GPUs},
			NodeTaints:     []corev1.Taint{simulatedTaint},
			Progress:       out,
			WithoutKubectl: true,
		})
	}
	return cluster.Start(ctx, cluster.Options{
		Nodes:          1,
		NodeCapacity:   map[string]string{"nvidia.com/gpu": opts.GPUs},
		Progress:       out,
		WithoutKubectl: true, // dev runs none: the user's own kubectl reads the cluster
	})
}

// crdsResource is the resource of CustomResourceDefinitions.
var crdsResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs installs crds (on an existing cluster, those missing) and waits until they are
// served.
func installCRDs(ctx context.Context, c *cluster.Cluster, in *installer, crds []*unstructured.Unstructured) error {
	if !in.existing {
		return c.ApplyCRDs(ctx, crds)
	}
	for _, crd := range crds {
		if err := in.apply(ctx, crdsResource, crd); err != nil {
			return err
		}
	}
	return c.WaitForCRDs(ctx, crds)
}

// applyAll writes docs through in (server-side apply, as `kubectl apply --server-side` would, on
// the session's own control plane).
func applyAll(ctx context.Context, c *cluster.Cluster, in *installer, docs []manifest.Document) error {
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, d := range docs {
		gvk := d.Object.GroupVersionKind()
		// Discovery can lag just behind a CRD that was established: ask again for a while.
		var m *meta.RESTMapping
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			var err error
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); meta.IsNoMatchError(err) {
				mapper.Reset()
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return fmt.Errorf("%s: finding the resource of %s: %w", d.Where(), gvk.Kind, err)
		}
		if err := in.apply(ctx, m.Resource, d.Object); err != nil {
			return fmt.Errorf("%s: %w", d.Where(), err)
		}
	}
	return nil
}

// sessionTable is the table of the evals.si resources, then, when podNamespaces are given, the
// table of their pods.
func sessionTable(ctx context.Context, c *cluster.Cluster, podNamespaces []string) (string, error) {
	rows, err := devTable(ctx, c)
	if err != nil || len(podNamespaces) == 0 {
		return formatRows(rows), err
	}
	pods, err := podTable(ctx, c, podNamespaces)
	return formatRows(rows) + "\n" + pods, err
}

// row is one evals.si resource in the table.
type row struct {
	Kind, Namespace, Name, Ready, Reason, Message string
}

// devTable lists every evals.si resource with its Ready condition.
func devTable(ctx context.Context, c *cluster.Cluster) ([]row, error) {
	var rows []row
	for _, k := range evalsi.Kinds {
		list, err := c.Dynamic().Resource(k.Resource).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			r := row{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), Ready: "-"}
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == evalsi.ConditionReady {
					r.Ready, _ = m["status"].(string)
					r.Reason, _ = m["reason"].(string)
					r.Message, _ = m["message"].(string)
				}
			}
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		return a.Kind+"/"+a.Namespace+"/"+a.Name < b.Kind+"/"+b.Namespace+"/"+b.Name
	})
	return rows, nil
}

func formatRows(rows []row) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tNAMESPACE\tNAME\tREADY\tREASON\tMESSAGE")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Kind, r.Namespace, r.Name, r.Ready, r.Reason, r.Message)
	}
	w.Flush()
	return b.String()
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
