package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/command"
	"evals.si/operator/reconcile"
	"evals.si/operator/reconcile/process"
	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
)

func releaseFinalizersCommand() *cli.Command {
	return &cli.Command{
		Name:  "release-finalizers",
		Usage: "remove the operator's finalizers from every evals.si object in a namespace (the evalsi chart runs it when it is uninstalled)",
		Flags: append([]cli.Flag{
			command.KubeconfigFlag(""), command.ContextFlag(),
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Required: true, Usage: "the namespace of the uninstalled operator"},
			&cli.StringSliceFlag{Name: "controllers", Usage: "the controllers whose finalizers to remove (default: all)"},
			&cli.StringFlag{Name: "leader-election-id", Value: evalsi.LeaderElectionID, Usage: "the operator's Lease, waited on until no replica holds it"},
			&cli.IntFlag{Name: "shards", Value: 1, Usage: "the operator's --shards: every shard's Lease is waited on"},
			&cli.DurationFlag{Name: "wait", Value: time.Minute, Usage: "how long to wait for the operator to let go of its Lease"},
			&cli.BoolFlag{Name: "finalizers", Value: true, Usage: "release the finalizers (false where the operator was granted no evals.si kind, so that none holds one)"},
			&cli.BoolFlag{Name: "delete-leases", Usage: "then delete every Lease the operator's replicas wrote, so that the uninstall leaves nothing"},
		}, command.LogFlags...),
		Action: func(c *cli.Context) error {
			log, err := command.NewLogger(c, os.Stderr)
			if err != nil {
				return err
			}
			rc, err := command.KubeConfig(c)
			if err != nil {
				return err
			}
			e, err := reconcile.New(reconcile.Config{Rest: rc, Namespace: c.String("namespace"), Controllers: c.StringSlice("controllers"), Log: log})
			if err != nil {
				return err
			}
			// A replica still running would put the finalizers back, and act on objects whose
			// finalizers are gone: release nothing until its Lease is gone or expired.
			var leases []string
			for i := range c.Int("shards") {
				leases = append(leases, process.ShardLease(c.String("leader-election-id"), shard.Shard{Index: i, Count: c.Int("shards")}))
			}
			if err := waitLeasesFree(c.Context, e.Kube(), c.String("namespace"), leases, c.Duration("wait")); err != nil {
				return cli.Exit(fmt.Sprintf("released nothing: %v", err), 1)
			}
			if c.Bool("finalizers") {
				n, err := e.ReleaseFinalizers(c.Context)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "released the finalizers of %d objects in %s\n", n, c.String("namespace"))
			}
			if c.Bool("delete-leases") {
				names := process.OperatorLeases(c.String("leader-election-id"), c.Int("shards"))
				if err := deleteLeases(c.Context, e.Kube(), c.String("namespace"), names); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "deleted the operator's Leases in %s\n", c.String("namespace"))
			}
			return nil
		},
	}
}

// waitLeasesFree waits until none of the operator's Leases (names: one, or one per shard) exists
// or is held. It returns why it stopped waiting otherwise: a Lease is still held, or it cannot be
// read (Forbidden, a timeout), which never counts as free.
func waitLeasesFree(ctx context.Context, kube kubernetes.Interface, ns string, names []string, timeout time.Duration) error {
	why := fmt.Errorf("the Lease was not read")
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			lease, err := kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
			if why = leaseHeld(lease, err, time.Now()); why != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("after %s: %w", timeout, why)
	}
	return nil
}

// leaseHeld says why the Lease read as lease (or err) may still have a running leader, or nil
// when it has none: the Lease does not exist, has no holder, or was not renewed in time.
func leaseHeld(l *coordinationv1.Lease, err error, now time.Time) error {
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("cannot read the operator's Lease, so a leader may still run: %w", err)
	}
	holder := holding.LeaseHolder(l, now)
	if holder == "" {
		return nil
	}
	expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	return fmt.Errorf("%s holds the operator's Lease %s until %s", holder, l.Name, expires.UTC().Format(time.RFC3339))
}

// deleteLeases deletes the Leases names in ns; one that is gone already is no error.
func deleteLeases(ctx context.Context, kube kubernetes.Interface, ns string, names []string) error {
	for _, name := range names {
		err := kube.CoordinationV1().Leases(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Lease %s/%s: %w", ns, name, err)
		}
	}
	return nil
}
