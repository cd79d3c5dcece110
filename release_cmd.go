package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/reconcile"
)

func releaseFinalizersCommand() *cli.Command {
	return &cli.Command{
		Name:  "release-finalizers",
		Usage: "remove the operator's finalizers from every evals.si object in a namespace (the evalsi chart runs it when it is uninstalled)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Usage: "kubeconfig file (default: in-cluster configuration)"},
			&cli.StringFlag{Name: "namespace", Required: true, Usage: "the namespace of the uninstalled operator"},
			&cli.StringSliceFlag{Name: "controllers", Usage: "the controllers whose finalizers to remove (default: all)"},
			&cli.StringFlag{Name: "leader-election-id", Value: "evalsi-operator", Usage: "the operator's Lease, waited on until no replica holds it"},
			&cli.DurationFlag{Name: "wait", Value: time.Minute, Usage: "how long to wait for the operator to let go of its Lease"},
		}, logFlags...),
		Action: func(c *cli.Context) error {
			log, err := newLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			rc, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			e, err := reconcile.New(reconcile.Config{Rest: rc, Namespace: c.String("namespace"), Controllers: c.StringSlice("controllers"), Log: log})
			if err != nil {
				return err
			}
			// A replica still running would put the finalizers back: wait until it has stopped.
			if err := waitLeaseFree(c.Context, e.Kube(), c.String("namespace"), c.String("leader-election-id"), c.Duration("wait")); err != nil {
				log.Warn("the operator still holds its Lease; releasing anyway", "err", err)
			}
			n, err := e.ReleaseFinalizers(c.Context)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "released the finalizers of %d objects in %s\n", n, c.String("namespace"))
			return nil
		},
	}
}

// waitLeaseFree waits until the Lease has no holder, has expired, or does not exist.
func waitLeaseFree(ctx context.Context, kube kubernetes.Interface, ns, name string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		lease, err := kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || leaseFree(lease, time.Now()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func leaseFree(l *coordinationv1.Lease, now time.Time) bool {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return true
	}
	return now.After(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second))
}
