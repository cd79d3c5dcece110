// Command evalsi-operator is the Kubernetes operator of the Evals.si evaluation platform.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// Set by the Makefile through -ldflags.
var (
	version = "dev"
	commit  = "unknown"
)

// kubernetesMinor is the one Kubernetes minor that this operator supports and is tested against.
const kubernetesMinor = "1.37"

func main() {
	app := &cli.App{
		Name:  "evalsi-operator",
		Usage: "the Kubernetes operator of the Evals.si evaluation platform",
		Commands: []*cli.Command{
			runCommand(),
			renderCommand(),
			devCommand(),
			evalsidCommand(),
			validateCommand(),
			webhookCommand(),
			releaseFinalizersCommand(),
			versionCommand(),
		},
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "evalsi-operator:", err)
		os.Exit(1)
	}
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the commit and the supported Kubernetes minor",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintf(c.App.Writer, "evalsi-operator %s (commit %s, Kubernetes %s)\n", version, commit, kubernetesMinor)
			return err
		},
	}
}
