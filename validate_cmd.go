package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"evals.si/operator/internal/manifest"
	"evals.si/operator/schemas"
)

func validateCommand() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check evals.si resources offline with the admission webhook's rules",
		ArgsUsage: " ",
		Description: "Prints file:document: /spec/field: message for each problem. Exit status: 0 when every\n" +
			"resource is valid, 1 when any is invalid, 2 when the input cannot be read.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "filename", Aliases: []string{"f"}, Required: true, Usage: "a file, a directory of files, or - for stdin"},
		},
		Action: func(c *cli.Context) error {
			docs, err := manifest.Read(c.String("filename"), c.App.Reader)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			invalid := 0
			for _, d := range docs {
				if d.Object.GroupVersionKind().Group != "evals.si" {
					continue
				}
				err := schemas.Validate(d.Object)
				if err == nil {
					continue
				}
				invalid++
				errs, ok := err.(schemas.Errors)
				if !ok {
					return cli.Exit(fmt.Sprintf("%s: %v", d.Where(), err), 2)
				}
				for _, e := range errs {
					fmt.Fprintf(c.App.Writer, "%s: %s\n", d.Where(), e)
				}
			}
			if invalid > 0 {
				return cli.Exit(fmt.Sprintf("%d of %d resources are invalid", invalid, len(docs)), 1)
			}
			return nil
		},
	}
}
