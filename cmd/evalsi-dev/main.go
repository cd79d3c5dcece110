// Command evalsi-dev is the development environment of evalsi-operator (`make dev`): a local
// control plane, the admission webhook, the reference evalsid and the operator, with the examples
// applied and a live table of their state. It is its own binary so that the operator's carries
// neither the control plane's builder nor anything else only development needs.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"evals.si/operator/cmd/evalsi-dev/devenv"
	"evals.si/operator/internal/command"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := app().RunContext(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "evalsi-dev:", err)
		code := 1
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		os.Exit(code)
	}
}

func app() *cli.App {
	return &cli.App{
		Name:  "evalsi-dev",
		Usage: "run a local control plane, the operator and the examples, and show their state (Ctrl-C stops it)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "gpus", Value: "8", Usage: "nvidia.com/gpu capacity of the KWOK node"},
			&cli.BoolFlag{Name: "keda", Value: true, Usage: "install KEDA's ScaledObject CRD"},
			&cli.StringFlag{Name: "kubeconfig", Usage: "run against the existing cluster of this kubeconfig file instead of starting one; what is missing is created and removed at the end"},
			&cli.StringFlag{Name: "context", Usage: "run against this context of the kubeconfig (--kubeconfig, else KUBECONFIG or ~/.kube/config) instead of starting a cluster"},
		}, renderFlags()...),
		Action: func(c *cli.Context) error {
			// evalsid's address is the session's own, known once it serves: devenv.Run fills it
			// in and checks it then.
			opts, err := command.ReadRenderOptions(c)
			if err != nil {
				return err
			}
			dev := devenv.Options{Render: opts, GPUs: c.String("gpus"), KEDA: c.Bool("keda")}
			if c.IsSet("kubeconfig") || c.IsSet("context") {
				dev.Existing = &devenv.Target{Kubeconfig: c.String("kubeconfig"), Context: c.String("context")}
			}
			return devenv.Run(c.Context, dev, c.App.Writer)
		},
	}
}

// renderFlags are the render flags dev honours: all but --api-url, since dev serves the reference
// evalsid itself and gives its address to the operator.
func renderFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range command.RenderFlags {
		if f.Names()[0] != "api-url" {
			out = append(out, f)
		}
	}
	return out
}
