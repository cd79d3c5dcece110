package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/internal/command"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/render"
)

func renderCommand() *cli.Command {
	return &cli.Command{
		Name:      "render",
		Usage:     "print, as a YAML stream, the objects the operator would apply for each resource",
		ArgsUsage: "[FILE|DIR|-]...",
		Description: "Validates every document as admission does, then renders the valid ones. Problems are printed to\n" +
			"stderr as FILE:LINE: KIND/NAME: /spec/field: sentence, as validate prints them. Exit status: 0 when\n" +
			"every resource rendered, 1 when any is invalid, 2 when the command line or the input cannot be used.\n\n" +
			"Examples:\n" +
			"  evalsi-operator render -f evaluator.yaml --default-image=registry.example/evalsi/platform:1.4.0\n" +
			"  evalsi-operator render -f manifests/ --autoscaling=false",
		Flags: append([]cli.Flag{
			command.FilenameFlag,
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Value: "default", Usage: "namespace of resources that name none"},
			&cli.BoolFlag{Name: "autoscaling", Value: true, Usage: "render as if KEDA's ScaledObject is served"},
		}, command.RenderFlags...),
		Action: func(c *cli.Context) error {
			docs, err := command.ReadManifests(c)
			if err != nil {
				return err
			}
			opts, err := command.RenderOptions(c)
			if err != nil {
				return err
			}
			opts.Autoscaling = c.Bool("autoscaling")
			var all []*unstructured.Unstructured
			var failed int
			for _, d := range docs {
				obj := d.Object
				if obj.GetNamespace() == "" && obj.GetKind() != "SandboxClass" {
					obj.SetNamespace(c.String("namespace"))
				}
				r, err := render.Object(obj, opts)
				if err != nil {
					failed++
					if !command.ReportInvalid(c.App.ErrWriter, d, err) {
						return cli.Exit("cannot render with these settings", command.ExitUsage)
					}
					continue
				}
				for _, child := range r.Objects {
					// As the operator applies them: the owner's children.
					if err := engine.StampChild(obj, child); err != nil {
						return err
					}
				}
				all = append(all, r.Objects...)
			}
			if err := render.WriteYAML(c.App.Writer, all); err != nil {
				return err
			}
			if failed > 0 {
				return cli.Exit(fmt.Sprintf("%d resources did not render", failed), command.ExitInvalid)
			}
			return nil
		},
	}
}
