package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/internal/manifest"
	"evals.si/operator/render"
)

func renderCommand() *cli.Command {
	return &cli.Command{
		Name:      "render",
		Usage:     "print, as a YAML stream, the objects the operator would apply for each resource",
		ArgsUsage: " ",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "filename", Aliases: []string{"f"}, Required: true, Usage: "a file, a directory of files, or - for stdin"},
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Value: "default", Usage: "namespace of resources that name none"},
			&cli.BoolFlag{Name: "autoscaling", Value: true, Usage: "render as if KEDA's ScaledObject is served"},
		}, renderFlags...),
		Action: func(c *cli.Context) error {
			docs, err := manifest.Read(c.String("filename"), c.App.Reader)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			opts := renderOptions(c)
			opts.Autoscaling = c.Bool("autoscaling")
			var all []*unstructured.Unstructured
			var failed int
			for _, d := range docs {
				obj := d.Object
				if obj.GroupVersionKind().Group != render.Group {
					continue
				}
				if obj.GetNamespace() == "" && obj.GetKind() != "SandboxClass" {
					obj.SetNamespace(c.String("namespace"))
				}
				r, err := render.Object(obj, opts)
				if err != nil {
					fmt.Fprintf(c.App.ErrWriter, "%s: %s %s: %v\n", d.Where(), obj.GetKind(), obj.GetName(), err)
					failed++
					continue
				}
				all = append(all, r.Objects...)
			}
			if err := render.WriteYAML(c.App.Writer, all); err != nil {
				return err
			}
			if failed > 0 {
				return cli.Exit(fmt.Sprintf("%d resources did not render", failed), 1)
			}
			return nil
		},
	}
}
