package main

import (
	"context"
	"fmt"
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
			command.KubeconfigFlag(""),
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "look in this namespace only (default: all)"},
			&cli.DurationFlag{Name: "older-than", Value: 24 * time.Hour, Usage: "age from which a server without an owner counts as leaked"},
		},
		Action: func(c *cli.Context) error {
			rc, err := command.KubeConfig(c.String("kubeconfig"))
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
			w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAMESPACE\tNAME\tAGE\tWHY")
			now := time.Now()
			for i := range list.Items {
				s := &list.Items[i]
				gone, err := owners.gone(c.Context, s)
				if err != nil {
					return err
				}
				if why := leakReason(s, gone, now, c.Duration("older-than")); why != "" {
					age := now.Sub(s.GetCreationTimestamp().Time).Round(time.Second)
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.GetNamespace(), s.GetName(), age, why)
				}
			}
			return w.Flush()
		},
	}
}

// leakReason says why a watcher's server is leaked, or "" when it is not: gone lists its owners
// that no longer exist.
func leakReason(s *unstructured.Unstructured, gone []metav1.OwnerReference, now time.Time, olderThan time.Duration) string {
	if len(gone) > 0 {
		return fmt.Sprintf("its owner %s %s is gone", gone[0].Kind, gone[0].Name)
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

// gone returns the owner references of obj whose objects no longer exist (or exist with another
// uid: a new object of the same name).
func (o ownerLookup) gone(ctx context.Context, obj *unstructured.Unstructured) ([]metav1.OwnerReference, error) {
	var out []metav1.OwnerReference
	for _, ref := range obj.GetOwnerReferences() {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: owner apiVersion %q: %w", obj.GetNamespace(), obj.GetName(), ref.APIVersion, err)
		}
		m, err := o.mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: owner kind %s: %w", obj.GetNamespace(), obj.GetName(), ref.Kind, err)
		}
		// Owners of namespaced objects are in the same namespace (or cluster-scoped).
		ns := obj.GetNamespace()
		if m.Scope.Name() != meta.RESTScopeNameNamespace {
			ns = ""
		}
		live, err := o.dyn.Resource(m.Resource).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, ref)
		case err != nil:
			return nil, fmt.Errorf("reading the owner %s %s of %s/%s: %w", ref.Kind, ref.Name, obj.GetNamespace(), obj.GetName(), err)
		case live.GetUID() != ref.UID:
			out = append(out, ref)
		}
	}
	return out, nil
}
