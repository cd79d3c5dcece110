package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/command"
)

func leakedServersCommand() *cli.Command {
	return &cli.Command{
		Name:  "leaked-servers",
		Usage: "list the CheckpointServers a checkpoint watcher made (labelled managed-by: evalsi) that nothing owns any more",
		Description: `A watcher's server is leaked when the object its ownerReference names is gone (the garbage
collector deletes such a server soon; listed until it has), or when it has no owner and is
older than --older-than. A watcher that gives each server an ownerReference to its own Pod
leaks none: see docs/install.md, "Running the checkpoint watcher".

Example:
  evalsi-operator leaked-servers --older-than=6h
  evalsi-operator leaked-servers -n team-a`,
		Flags: []cli.Flag{
			command.KubeconfigFlag(""), command.ContextFlag(),
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "look in this namespace only (default: all)"},
			&cli.DurationFlag{Name: "older-than", Value: 24 * time.Hour, Usage: "age from which a server without an owner counts as leaked"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "table, json or yaml"},
		},
		Action: func(c *cli.Context) error {
			rc, err := command.KubeConfig(c)
			if err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(rc)
			if err != nil {
				return err
			}
			dc, err := discovery.NewDiscoveryClientForConfig(rc)
			if err != nil {
				return err
			}
			owners := ownerLookup{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
			list, err := dyn.Resource(evalsi.CheckpointServers).Namespace(c.String("namespace")).List(c.Context,
				metav1.ListOptions{LabelSelector: evalsi.LabelManagedBy + "=" + evalsi.ManagedBy})
			if err != nil {
				return fmt.Errorf("listing CheckpointServers: %w", err)
			}
			output := c.String("output")
			if output != "table" && output != "json" && output != "yaml" {
				return cli.Exit(fmt.Sprintf("--output=%q: one of table, json, yaml", output), command.ExitUsage)
			}
			now := time.Now()
			// Every server is judged: one whose owner cannot be read is listed as such, and the
			// command fails after the list, not at the first.
			var unread int
			rows := []leakedServer{}
			for i := range list.Items {
				s := &list.Items[i]
				row := leakedServer{Namespace: s.GetNamespace(), Name: s.GetName(), Age: now.Sub(s.GetCreationTimestamp().Time).Round(time.Second).String()}
				gone, err := owners.gone(c.Context, s)
				if err != nil {
					unread++
					row.Why = "unknown: " + err.Error()
					rows = append(rows, row)
					continue
				}
				if row.Why = leakReason(s, gone, now, c.Duration("older-than")); row.Why != "" {
					rows = append(rows, row)
				}
			}
			if err := printLeaked(c.App.Writer, output, rows); err != nil {
				return err
			}
			if unread > 0 {
				return fmt.Errorf("the owners of %d CheckpointServers could not be read (listed as unknown)", unread)
			}
			return nil
		},
	}
}

// leakedServer is one line of leaked-servers' answer.
type leakedServer struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Age       string `json:"age"`
	Why       string `json:"why"`
}

// printLeaked writes rows as a table, JSON or YAML.
func printLeaked(w io.Writer, output string, rows []leakedServer) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "yaml":
		out, err := yaml.Marshal(rows)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tAGE\tWHY")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Namespace, r.Name, r.Age, r.Why)
	}
	return tw.Flush()
}

// leakReason says why a watcher's server is leaked, or "" when it is not: gone says, of each
// owner reference that names nothing live, why (ownerLookup.gone).
func leakReason(s *unstructured.Unstructured, gone []string, now time.Time, olderThan time.Duration) string {
	if len(gone) > 0 {
		return strings.Join(gone, "; ")
	}
	if len(s.GetOwnerReferences()) > 0 {
		return ""
	}
	if age := now.Sub(s.GetCreationTimestamp().Time); age >= olderThan {
		return fmt.Sprintf("no owner, and older than %s", olderThan)
	}
	return ""
}

// ownerLookup reads the owners of objects.
type ownerLookup struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// gone says, of each owner reference of obj that names nothing live, why: the owner no longer
// exists (or exists with another uid: a new object of the same name), or the reference names a
// kind the API server does not serve, or an apiVersion that is not one, so that it never will.
// It fails only when an owner could not be read.
func (o ownerLookup) gone(ctx context.Context, obj *unstructured.Unstructured) ([]string, error) {
	var out []string
	for _, ref := range obj.GetOwnerReferences() {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			out = append(out, fmt.Sprintf("its owner reference's apiVersion %q is not one", ref.APIVersion))
			continue
		}
		m, err := o.mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
		if meta.IsNoMatchError(err) {
			out = append(out, fmt.Sprintf("its owner %s %s is of a kind the API server does not serve (%s)", ref.Kind, ref.Name, ref.APIVersion))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("mapping the owner kind %s: %w", ref.Kind, err)
		}
		// Owners of namespaced objects are in the same namespace (or cluster-scoped).
		ns := obj.GetNamespace()
		if m.Scope.Name() != meta.RESTScopeNameNamespace {
			ns = ""
		}
		live, err := o.dyn.Resource(m.Resource).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), err == nil && live.GetUID() != ref.UID:
			out = append(out, fmt.Sprintf("its owner %s %s is gone", ref.Kind, ref.Name))
		case err != nil:
			return nil, fmt.Errorf("reading the owner %s %s: %w", ref.Kind, ref.Name, err)
		}
	}
	return out, nil
}
