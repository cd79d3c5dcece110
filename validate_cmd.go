package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"evals.si/operator/render"
)

func validateCommand() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check evals.si resources offline with the admission webhook's rules",
		ArgsUsage: "[FILE|DIR|-]...",
		Description: "Checks every document as admission does and prints FILE:LINE: KIND/NAME: /spec/field: sentence\n" +
			"for each problem. Exit status: 0 when every resource is valid, 1 when any is invalid, 2 when the\n" +
			"command line or the input cannot be used.\n\n" +
			"Examples:\n" +
			"  evalsi-operator validate -f evalrun.yaml\n" +
			"  evalsi-operator validate -f manifests/ -f extra.yaml\n" +
			"  evalsi-operator validate manifests/*.yaml\n" +
			"  kustomize build . | evalsi-operator validate -f -",
		Flags: []cli.Flag{filenameFlag},
		Action: func(c *cli.Context) error {
			docs, err := readManifests(c)
			if err != nil {
				return err
			}
			invalid := 0
			for _, d := range docs {
				if err := render.Validate(d.Object); err != nil {
					invalid++
					if !reportInvalid(c.App.Writer, d, err) {
						return cli.Exit("cannot validate", exitUsage)
					}
				}
			}
			if invalid > 0 {
				return cli.Exit(fmt.Sprintf("%d of %d resources are invalid", invalid, len(docs)), exitInvalid)
			}
			return nil
		},
	}
}
