package command

import (
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"evals.si/operator/evalsi"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/schemas"
)

// Exit codes of the commands that read manifests.
const (
	ExitInvalid = 1 // a document is invalid
	ExitUsage   = 2 // the command line or the input cannot be used
)

// FilenameFlag takes files, directories and - (stdin) as `kubectl apply -f` does; it may be
// given many times, and the command's arguments count as more of them (so a shell glob such as
// -f dir/*.yaml reads every file it names).
var FilenameFlag = &cli.StringSliceFlag{Name: "filename", Aliases: []string{"f"}, Usage: "a file, a directory of files, or - for stdin; repeatable"}

// ReadManifests returns the evals.si documents of every -f and argument, in order. Documents of
// other API groups are skipped. No input, or input that cannot be read, is a usage error.
func ReadManifests(c *cli.Context) ([]manifest.Document, error) {
	paths := append(c.StringSlice("filename"), c.Args().Slice()...)
	if len(paths) == 0 {
		return nil, cli.Exit(fmt.Sprintf("%s: give the resources with -f FILE, -f DIR or -f -", c.Command.Name), ExitUsage)
	}
	docs, err := manifest.ReadAll(paths, c.App.Reader)
	if err != nil {
		return nil, cli.Exit(err.Error(), ExitUsage)
	}
	var ours []manifest.Document
	for _, d := range docs {
		if d.Object.GroupVersionKind().Group == evalsi.Group {
			ours = append(ours, d)
		}
	}
	return ours, nil
}

// ReportInvalid writes one line per problem of d, FILE:LINE: KIND/NAME: /pointer: sentence, and
// says whether err is the spec's fault (schemas.Errors) rather than the command's.
func ReportInvalid(w io.Writer, d manifest.Document, err error) bool {
	prefix := fmt.Sprintf("%s: %s/%s: ", d.Where(), d.Object.GetKind(), d.Object.GetName())
	var errs schemas.Errors
	if !errors.As(err, &errs) {
		fmt.Fprintf(w, "%s%v\n", prefix, err)
		return false
	}
	for _, e := range errs {
		fmt.Fprintf(w, "%s%s\n", prefix, e)
	}
	return true
}
