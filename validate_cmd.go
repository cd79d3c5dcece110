package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/command"
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
			"  kustomize build . | evalsi-operator validate -f -\n" +
			"  evalsi-operator validate -f run.yaml --project-binding team-b=team-a\n\n" +
			"An object may name, in its evals.si/project label, only the project its namespace is bound to (the\n" +
			"Namespace's evals.si/project label, set by a cluster administrator; else the namespace's name). Give\n" +
			"each binding with --project-binding NAMESPACE=PROJECT (--project-binding none when there are none)\n" +
			"to check it; without, a label naming another project is noted as not checked offline.",
		Flags: []cli.Flag{command.FilenameFlag,
			&cli.StringSliceFlag{Name: "project-binding", Usage: "NAMESPACE=PROJECT, the project a namespace is bound to; repeatable; 'none' for no bindings"},
			command.MaxPoolReplicasFlag,
		},
		Action: func(c *cli.Context) error {
			docs, err := command.ReadManifests(c)
			if err != nil {
				return err
			}
			bindings, err := projectBindings(c.StringSlice("project-binding"))
			if err != nil {
				return err
			}
			invalid := 0
			for _, d := range docs {
				if label := d.Object.GetLabels()[evalsi.LabelProject]; bindings == nil && label != "" && d.Object.GetNamespace() != "" && label != d.Object.GetNamespace() {
					fmt.Fprintf(c.App.ErrWriter, "%s: %s/%s: note: whether namespace %s may act in project %s depends on its binding, which cannot be checked offline; give --project-binding\n",
						d.Where(), d.Object.GetKind(), d.Object.GetName(), d.Object.GetNamespace(), label)
				}
				limits := render.Limits{ProjectBindings: bindings, MaxPoolReplicas: int32(c.Int("max-pool-replicas"))}
				if err := render.Validate(d.Object, limits); err != nil {
					invalid++
					if !command.ReportInvalid(c.App.Writer, d, err) {
						return cli.Exit("cannot validate", command.ExitUsage)
					}
				}
			}
			if invalid > 0 {
				return cli.Exit(fmt.Sprintf("%d of %d resources are invalid", invalid, len(docs)), command.ExitInvalid)
			}
			return nil
		},
	}
}

// projectBindings parses --project-binding values (NAMESPACE=PROJECT, or none); nil when none
// were given, which leaves the bindings unknown.
func projectBindings(values []string) (map[string]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range values {
		if v == "none" {
			continue
		}
		ns, project, ok := strings.Cut(v, "=")
		if !ok || ns == "" || project == "" {
			return nil, cli.Exit(fmt.Sprintf("--project-binding %q: want NAMESPACE=PROJECT", v), command.ExitUsage)
		}
		out[ns] = project
	}
	return out, nil
}
