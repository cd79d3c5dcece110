package devenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"evals.si/operator/apiclient"
	"evals.si/operator/apiclient/evalsid"
	"evals.si/operator/cluster"
	"evals.si/operator/evalsi"
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
	// Until, when set, ends the session once it returns true for the table of resources.
	Until func(rows []Row) bool
}

// Run starts a control plane with a GPU node, installs the CRDs (and KEDA's), runs the admission
// webhook, serves the reference evalsid, runs the operator, applies the examples, and prints a
// table of the evals.si resources whenever it changes, until ctx ends (or opts.Until holds). It
// reads the CRDs, the chart's policies and the examples from the checkout (Checkout).
func Run(ctx context.Context, opts Options, out io.Writer) error {
	root, err := Checkout()
	if err != nil {
		return err
	}
	out = &lockedWriter{w: out} // the builds below report side by side
	// helm renders the admission policies once the control plane is up: it builds beside it.
	go cluster.Helm(ctx, out)
	fmt.Fprintln(out, "starting a local control plane (the first run builds it, with a line every 30 s)")
	c, err := cluster.Start(ctx, cluster.Options{
		Nodes:          1,
		NodeCapacity:   map[string]string{"nvidia.com/gpu": opts.GPUs},
		Progress:       out,
		WithoutKubectl: true, // dev runs none: the user's own kubectl reads the cluster
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	crds, err := readDocuments(root, "chart/evalsi-crds/files/crds/*.yaml")
	if err != nil {
		return err
	}
	if err := c.ApplyCRDs(ctx, objects(crds)); err != nil {
		return err
	}
	if opts.KEDA {
		if err := c.InstallKedaCRDs(ctx); err != nil {
			return err
		}
	}

	// Admission as a real install has it: what kubectl apply is refused, it is refused here.
	webhookErr, err := startDevAdmission(ctx, c, out)
	if err != nil {
		return err
	}
	if err := applyDevPolicies(ctx, c, root, out); err != nil {
		return err
	}

	// The reference evalsid on loopback, and the operator's token for it.
	// The operator of dev acts in every namespace's project, as a platform identity; evalsid reads
	// the projects' bindings and the SandboxClasses from the cluster, as the platform's does.
	api := evalsid.New(map[string]string{devToken: devOperatorIdentity}, evalsid.DefaultSchedule)
	api.TrustPlatform(devOperatorIdentity)
	dir, err := evalsid.WatchCluster(ctx, c.Config, "")
	if err != nil {
		return err
	}
	api.SetDirectory(dir)
	apiListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	apiErr := make(chan error, 1)
	go func() { apiErr <- api.Serve(ctx, apiListener) }()
	tokenFile := filepath.Join(c.Dir, "evalsid-token")
	if err := os.WriteFile(tokenFile, []byte(devToken+"\n"), 0o600); err != nil {
		return err
	}
	apiURL := "http://" + apiListener.Addr().String()
	opts.Render.APIURL = apiURL
	fmt.Fprintf(out, "evalsid (reference) serving on %s: it runs no evaluator, so every run's result is SIMULATED (made up, marked so in its status)\n", apiURL)

	logPath := filepath.Join(c.Dir, "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	opCtx, stopOperator := context.WithCancel(ctx)
	defer stopOperator()
	opErr := make(chan error, 1)
	go func() {
		opErr <- reconcile.RunManager(opCtx, reconcile.ManagerConfig{Engine: reconcile.Config{
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
	if err := applyAll(ctx, c, examples); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nthe operator runs; its log: %s\nin another shell:\n  export KUBECONFIG=%s\n  kubectl get evalsi -A\nCtrl-C stops everything.\n\n", logPath, c.Kubeconfig)

	last := ""
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		rows, err := devTable(ctx, c)
		if err == nil {
			if table := formatRows(rows); table != last {
				fmt.Fprintf(out, "%s\n%s", time.Now().Format("15:04:05"), table)
				last = table
			}
			if opts.Until != nil && opts.Until(rows) {
				return nil
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

func objects(docs []manifest.Document) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(docs))
	for i, d := range docs {
		out[i] = d.Object
	}
	return out
}

// applyAll applies docs with server-side apply, as `kubectl apply --server-side` would.
func applyAll(ctx context.Context, c *cluster.Cluster, docs []manifest.Document) error {
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	client := c.Dynamic()
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
		r := client.Resource(m.Resource)
		var ri dynamic.ResourceInterface = r
		if ns := d.Object.GetNamespace(); ns != "" {
			ri = r.Namespace(ns)
		}
		// A CRD just established may not yet be known to server-side apply (404 "There can be a
		// delay between when CustomResourceDefinitions are created and when they are available"):
		// apply again for a while.
		var applyErr error
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, applyErr = ri.Apply(ctx, d.Object.GetName(), d.Object, metav1.ApplyOptions{FieldManager: "evalsi-dev", Force: true})
			return applyErr == nil, nil
		})
		if err != nil {
			return fmt.Errorf("%s: applying %s %s: %w", d.Where(), gvk.Kind, d.Object.GetName(), applyErr)
		}
	}
	return nil
}

// Row is one evals.si resource in the table.
type Row struct {
	Kind, Namespace, Name, Ready, Reason, Message string
}

// devTable lists every evals.si resource with its Ready condition.
func devTable(ctx context.Context, c *cluster.Cluster) ([]Row, error) {
	var rows []Row
	for _, gvr := range []schema.GroupVersionResource{
		evalsi.Evaluators, evalsi.SandboxClasses, evalsi.CheckpointServers,
		evalsi.EvalRuns, evalsi.OnlineEvalPolicies, evalsi.TraceSources,
	} {
		list, err := c.Dynamic().Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			row := Row{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), Ready: "-"}
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == evalsi.ConditionReady {
					row.Ready, _ = m["status"].(string)
					row.Reason, _ = m["reason"].(string)
					row.Message, _ = m["message"].(string)
				}
			}
			rows = append(rows, row)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		return a.Kind+"/"+a.Namespace+"/"+a.Name < b.Kind+"/"+b.Namespace+"/"+b.Name
	})
	return rows, nil
}

func formatRows(rows []Row) string {
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
