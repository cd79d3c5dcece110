// Command evalsi-dev is the development environment of evalsi-operator (`make dev`): a local
// control plane, the admission webhook, the reference evalsid and the operator, with the examples
// applied and a live table of their state. It is its own binary so that the operator's carries
// neither the control plane's builder nor anything else only development needs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"evals.si/operator/cluster"
	"evals.si/operator/cmd/evalsi-dev/devenv"
	"evals.si/operator/cmd/evalsi-release/release"
	"evals.si/operator/internal/checkout"
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
			&cli.BoolFlag{Name: "real-node", Usage: "run the examples' pods in containers on a real node (kubelet, containerd, runc, CNI, kube-proxy, CoreDNS, kube-router) in namespaces of the session's own, from the images of make images; needs root"},
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
			if !c.Bool("real-node") {
				return devenv.Run(c.Context, dev, c.App.Writer)
			}
			if dev.Existing != nil {
				return cli.Exit("--real-node starts a control plane of its own: it does not run against --kubeconfig or --context", 2)
			}
			return onRealNode(c.Context, dev, c.App.Writer)
		},
	}
}

// onRealNode runs the session on a real node, in namespaces of its own (cluster.RunIsolated).
// Outside them, first: the images, built as a user builds them (make images; the base image's
// first build needs Debian's mirror), and a listener on the host's loopback for kubectl. The
// kubeconfig for it and the operator's log go to a directory the host sees, which goes with the
// session.
func onRealNode(ctx context.Context, dev devenv.Options, out io.Writer) error {
	isolation := cluster.Isolation{Progress: out, HostDir: true}
	if !cluster.Inside() {
		root, err := checkout.Root()
		if err != nil {
			return err
		}
		fmt.Fprintln(out, "building the images (make images)")
		if err := release.MakeImages(ctx, root, out); err != nil {
			return err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		host, err := l.(*net.TCPListener).File()
		l.Close()
		if err != nil {
			return err
		}
		defer host.Close()
		isolation.Files = []*os.File{host}
	}
	var err error // inside's
	code := cluster.RunIsolated(isolation, func() int {
		var l net.Listener
		if l, err = net.FileListener(cluster.Inherited(0)); err != nil {
			err = fmt.Errorf("the listener handed in from the host: %w", err)
			return 1
		}
		dev.RealNode = &devenv.RealNode{Host: l, Dir: cluster.HostDir()}
		if err = devenv.Run(ctx, dev, out); err != nil {
			return 1
		}
		return 0
	})
	switch {
	case err != nil:
		return err
	case code != 0:
		return cli.Exit("the session on the real node ended with an error (above)", code)
	}
	return nil
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
