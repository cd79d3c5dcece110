// Command evalsi-operator is the Kubernetes operator of the Evals.si evaluation platform.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"evals.si/operator/guest"
	"evals.si/operator/internal/command"
	"evals.si/operator/isolation"
)

func main() {
	isolation.RunChild() // the probe's user-namespace check starts this binary again as a child
	if filepath.Base(os.Args[0]) == guest.Name {
		// Started as evalsi-guest (the platform image's link, or the copy a pod rung trial
		// runs): the guest, not the operator's commands.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := guest.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command line args and returns the exit status: 0, the status a command chose
// (validate and render: 1 for invalid input), 2 for a command line that cannot be used, else 1.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := newApp(stdin, stdout, stderr).RunContext(ctx, args)
	if err == nil {
		return 0
	}
	code := 1
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		code = ec.ExitCode()
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintln(stderr, "evalsi-operator:", msg)
	}
	return code
}

// newApp is the command line: every command, with usage errors as exit status 2.
func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	usageError := func(_ *cli.Context, err error, _ bool) error { return cli.Exit(err.Error(), command.ExitUsage) }
	app := &cli.App{
		Name:  "evalsi-operator",
		Usage: "the Kubernetes operator of the Evals.si evaluation platform",
		Description: `Exit status: 0 when the command did what it was asked; 1 when it failed, or found what it
checks wanting (validate and render: a document is invalid; check-sign-in: evalsid refused the
sign-in or did not answer; probe: the isolation floor is not met); 2 when the command line or its
input cannot be used. Shell completion: evalsi-operator completion bash|zsh.`,
		EnableBashCompletion: true,
		Version:              versionString(),
		Reader:               stdin, Writer: stdout, ErrWriter: stderr,
		Commands: []*cli.Command{
			runCommand(),
			renderCommand(),
			evalsidCommand(),
			validateCommand(),
			webhookCommand(),
			releaseFinalizersCommand(),
			leakedServersCommand(),
			probeCommand(),
			podCertificateSignerCommand(),
			checkSignInCommand(),
			completionCommand(),
			versionCommand(),
		},
		// An unknown command is a usage error, not a help topic.
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return cli.Exit(fmt.Sprintf("%q is not a command; run evalsi-operator --help", c.Args().First()), command.ExitUsage)
			}
			return cli.ShowAppHelp(c)
		},
		OnUsageError:   usageError,
		ExitErrHandler: func(*cli.Context, error) {}, // run reports the error and chooses the status
	}
	for _, c := range app.Commands {
		c.OnUsageError = usageError
	}
	return app
}
