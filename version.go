package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"evals.si/operator/evalsi"
)

// version and commit are set by the Makefile and the release through -ldflags; the user agents
// of the operator and the webhook carry the version.
var (
	version = "dev"
	commit  = "unknown"
)

// versionString is what version and --version print after the program's name.
func versionString() string {
	return fmt.Sprintf("%s (commit %s, Kubernetes %s)", version, commit, evalsi.KubernetesMinor)
}

// versionCommand prints the version, the commit and the supported Kubernetes minor.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the commit and the supported Kubernetes minor",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintf(c.App.Writer, "evalsi-operator %s\n", versionString())
			return err
		},
	}
}
