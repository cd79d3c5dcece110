package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"evals.si/operator/internal/command"
	"evals.si/operator/isolation"
)

func probeCommand() *cli.Command {
	return &cli.Command{
		Name:  "probe",
		Usage: "find out what isolation is in force for this process, and fail when a sandbox class's floor is not met",
		Description: `Every sandbox pool pod runs this first, as an init container with the pool's own security
context: it checks Landlock (the ABI, and that a ruleset really keeps a path from being read),
user namespaces (the pod's own, and a nested one mapping root), the seccomp mode, no_new_privs,
the effective capabilities, a read-only root file system, and which addresses answer. It writes
the result as JSON to the termination message (and stdout), and exits 1 when the rung's floor is
not met, naming what is missing, so that the pod never runs a trial without it.

Example:
  evalsi-operator probe --rung=landlock
  evalsi-operator probe --rung=bubblewrap --user-namespaces --reach=metadata=169.254.169.254:80`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "rung", Required: true, Usage: "the class's rung: pod, bubblewrap or landlock"},
			&cli.BoolFlag{Name: "user-namespaces", Usage: "the class runs its pods in user namespaces (hostUsers: false)"},
			&cli.StringSliceFlag{Name: "reach", Value: cli.NewStringSlice(metadataReach()...),
				Usage: "NAME=HOST:PORT to dial (default: every cloud metadata address, metadata and metadata-<host>); the Kubernetes API (from KUBERNETES_SERVICE_HOST) is added as kubernetes"},
			&cli.StringSliceFlag{Name: "unreachable",
				Usage: "names of --reach targets that must not answer for the floor to be met (default: every metadata and metadata-<host> target)"},
			&cli.DurationFlag{Name: "dial-timeout", Value: 3 * time.Second, Usage: "how long an address may take to answer"},
			&cli.DurationFlag{Name: "settle", Value: 15 * time.Second, Usage: "how long every target is dialed again while an --unreachable one answers (NetworkPolicies are programmed after a pod starts)"},
			&cli.StringSliceFlag{Name: "without", Usage: "simulate a node without these primitives: landlock, userns"},
			&cli.StringSliceFlag{Name: "tls", Usage: "NAME of a --reach target that serves TLS: its certificate is verified with --ca-file once it answers"},
			&cli.StringFlag{Name: "ca-file", Usage: "CA bundle that verifies the --tls targets (default: the system's roots)"},
			&cli.StringFlag{Name: "temp-dir", Value: os.TempDir(), Usage: "where the Landlock check writes the two files it reads"},
			&cli.StringFlag{Name: "termination-log", Value: "/dev/termination-log", Usage: "where the result is written for the pod's status (\"\" for nowhere)"},
		},
		Action: func(c *cli.Context) error {
			rung := c.String("rung")
			switch rung {
			case isolation.RungPod, isolation.RungBubblewrap, isolation.RungLandlock:
			default:
				return cli.Exit(fmt.Sprintf("--rung=%q: one of pod, bubblewrap, landlock", rung), command.ExitUsage)
			}
			var targets []isolation.Target
			for _, r := range c.StringSlice("reach") {
				name, addr, ok := strings.Cut(r, "=")
				if _, _, err := net.SplitHostPort(addr); !ok || name == "" || err != nil {
					return cli.Exit(fmt.Sprintf("--reach=%q: NAME=HOST:PORT", r), command.ExitUsage)
				}
				targets = append(targets, isolation.Target{Name: name, Address: addr})
			}
			if host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"); host != "" && port != "" {
				targets = append(targets, isolation.Target{Name: "kubernetes", Address: net.JoinHostPort(host, port)})
			}
			unreachable := c.StringSlice("unreachable")
			if !c.IsSet("unreachable") {
				for _, t := range targets {
					if isolation.IsMetadata(t.Name) {
						unreachable = append(unreachable, t.Name)
					}
				}
			}
			for i := range targets {
				targets[i].Closed = slices.Contains(unreachable, targets[i].Name)
				targets[i].TLS = slices.Contains(c.StringSlice("tls"), targets[i].Name)
			}
			floor := isolation.Floor{Rung: rung, UserNamespaces: c.Bool("user-namespaces"), Unreachable: unreachable}
			result := floor.Judge(isolation.Probe(c.Context, isolation.Options{
				Targets: targets, DialTimeout: c.Duration("dial-timeout"), Settle: c.Duration("settle"),
				Without: c.StringSlice("without"), TempDir: c.String("temp-dir"), CAFile: c.String("ca-file"),
			}))
			out, err := json.Marshal(result)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, string(out))
			if path := c.String("termination-log"); path != "" {
				// A missing termination log (outside a pod) is no failure: stdout has the result.
				if err := os.WriteFile(path, out, 0o644); err != nil && !os.IsNotExist(err) {
					fmt.Fprintln(c.App.ErrWriter, "evalsi-operator probe: writing the termination log:", err)
				}
			}
			if len(result.Missing) > 0 {
				return cli.Exit("the "+rung+" floor is not met: missing "+strings.Join(result.Missing, ", "), 1)
			}
			return nil
		},
	}
}

// metadataReach is the probe's default --reach: every cloud metadata address.
func metadataReach() []string {
	var out []string
	for _, t := range isolation.MetadataTargets() {
		out = append(out, t.Name+"="+t.Address)
	}
	return out
}
