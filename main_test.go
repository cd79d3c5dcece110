package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"evals.si/operator/internal/golden"
	"evals.si/operator/internal/manifest"
)

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	app := &cli.App{Writer: &out, Commands: []*cli.Command{versionCommand()}}
	if err := app.Run([]string{"evalsi-operator", "version"}); err != nil {
		t.Fatal(err)
	}
	want := "evalsi-operator dev (commit unknown, Kubernetes 1.37)\n"
	if out.String() != want {
		t.Errorf("version printed %q, want %q", out.String(), want)
	}
}

// TestRenderCommandGolden renders the examples with the render command and compares the stream
// with its golden file.
func TestRenderCommandGolden(t *testing.T) {
	var out, errOut bytes.Buffer
	app := &cli.App{Writer: &out, ErrWriter: &errOut, Commands: []*cli.Command{renderCommand()}}
	if err := app.Run([]string{"evalsi-operator", "render", "-f", "testdata/examples", "--default-image=evalsi/platform:1.4.0"}); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	golden.Check(t, "testdata/render-command/examples.yaml", out.Bytes())
}

func TestRenderCommandNamesFileDocumentAndField(t *testing.T) {
	var out, errOut bytes.Buffer
	app := &cli.App{Writer: &out, ErrWriter: &errOut, Commands: []*cli.Command{renderCommand()},
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run([]string{"evalsi-operator", "render", "-f", "testdata/render-command/invalid.yaml"})
	if code := exitCode(err); code != 1 {
		t.Fatalf("exit code %d (%v), want 1", code, err)
	}
	for _, want := range []string{
		`testdata/render-command/invalid.yaml:2: Evaluator typo: spec: json: unknown field "replicaz"`,
		`testdata/render-command/invalid.yaml:3: CheckpointServer nomodel: spec.model: required`,
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	if !strings.Contains(out.String(), "name: fine-evaluator") {
		t.Errorf("the valid resource was not rendered:\n%s", out.String())
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ec, ok := err.(cli.ExitCoder); ok {
		return ec.ExitCode()
	}
	return -1
}

// TestValidateCommandGivesTheValidatorsMessages runs validate over the admission cases: every
// invalid document's expected error is printed as file:document: pointer: message.
func TestValidateCommandGivesTheValidatorsMessages(t *testing.T) {
	run := func(path string) (string, int) {
		var out bytes.Buffer
		app := &cli.App{Writer: &out, ErrWriter: &out, Commands: []*cli.Command{validateCommand()},
			ExitErrHandler: func(*cli.Context, error) {}}
		err := app.Run([]string{"evalsi-operator", "validate", "-f", path})
		return out.String(), exitCode(err)
	}
	out, code := run("testdata/admission/invalid.yaml")
	if code != 1 {
		t.Fatalf("exit %d for invalid specs, want 1", code)
	}
	docs, err := manifest.Read("testdata/admission/invalid.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		want := d.Where() + ": " + d.Object.GetAnnotations()["test.evals.si/expect"]
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q", want)
		}
	}
	if out, code := run("testdata/admission/valid.yaml"); code != 0 {
		t.Errorf("exit %d for valid specs, want 0:\n%s", code, out)
	}
	if _, code := run("testdata/admission/missing.yaml"); code != 2 {
		t.Errorf("exit %d for a missing file, want 2", code)
	}
}
