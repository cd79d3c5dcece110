package main

import (
	"bytes"
	"testing"

	"github.com/urfave/cli/v2"
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
