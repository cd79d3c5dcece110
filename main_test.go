package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/internal/golden"
	"evals.si/operator/internal/manifest"
)

// TestMain removes, once the tests end, the binaries clustertest built for them.
func TestMain(m *testing.M) { os.Exit(clustertest.New(cluster.Options{}).Main(m)) }

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

// TestCommandOutput runs validate and render as a user would, with several files, globs (a
// shell passes them as arguments), directories, stdin, mixes of valid and invalid documents,
// and usage errors, and compares the exit status and output with testdata/commands/<case>.txt.
func TestCommandOutput(t *testing.T) {
	const in = "testdata/commands/input/"
	bad, err := os.ReadFile(in + "bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args  string
		stdin string
	}{
		"validate-good-then-bad":       {args: "validate -f " + in + "good.yaml " + in + "bad.yaml"},
		"validate-bad-then-good":       {args: "validate -f " + in + "bad.yaml -f " + in + "good.yaml"},
		"validate-glob":                {args: "validate -f " + in + "dir/a.yaml " + in + "dir/b.yml " + in + "dir/c.json"},
		"validate-directory":           {args: "validate -f " + in + "dir"},
		"validate-stdin-and-file":      {args: "validate -f - -f " + in + "good.yaml", stdin: string(bad)},
		"validate-all-valid":           {args: "validate " + in + "good.yaml " + in + "dir/a.yaml"},
		"validate-no-input":            {args: "validate"},
		"validate-missing-file":        {args: "validate -f " + in + "missing.yaml"},
		"validate-unknown-flag":        {args: "validate --filenames " + in + "good.yaml"},
		"render-good-and-bad":          {args: "render --default-image=evalsi/platform:1.4.0 -f " + in + "good.yaml " + in + "bad.yaml"},
		"render-directory":             {args: "render --default-image=evalsi/platform:1.4.0 -f " + in + "dir"},
		"render-stdin":                 {args: "render -f -", stdin: string(bad)},
		"render-no-input":              {args: "render"},
		"render-outside-evalsid":       {args: "render --api-url=https://evalsid.evals.example -f " + in + "good.yaml"},
		"render-outside-evalsid-cidrs": {args: "render --default-image=evalsi/platform:1.4.0 --api-url=https://evalsid.evals.example --api-network-peers=[{\"ipBlock\":{\"cidr\":\"203.0.113.10/32\"}}] --api-network-port=8443 -f " + in + "dir/a.yaml"},
		"render-api-server-not-a-cidr": {args: "render --kubernetes-api-cidrs=10.0.0.1 -f " + in + "good.yaml"},
		"render-private-ca":            {args: "render --default-image=evalsi/platform:1.4.0 --api-url=https://evalsid.evalsi-platform.svc:8443 --api-ca-secret=evalsid-ca -f " + in + "dir/a.yaml"},
		"render-ca-secret-not-a-name":  {args: "render --api-ca-secret=Evalsid_CA -f " + in + "good.yaml"},
		"unknown-command":              {args: "valdiate -f " + in + "good.yaml"},
		"version-flag":                 {args: "--version"},
		"validate-admission-cases":     {args: "validate -f testdata/admission/valid.yaml testdata/admission/invalid.yaml"},
		"validate-project-offline":     {args: "validate -f " + in + "projects.yaml"},
		"validate-project-unbound":     {args: "validate -f " + in + "projects.yaml --project-binding none"},
		"validate-project-bound":       {args: "validate -f " + in + "projects.yaml --project-binding team-b=team-a"},
		"validate-project-bad-flag":    {args: "validate -f " + in + "projects.yaml --project-binding team-b"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"evalsi-operator"}, strings.Fields(tc.args)...)
			code := execute(context.Background(), args, strings.NewReader(tc.stdin), &out, &errOut)
			got := fmt.Sprintf("$ evalsi-operator %s\nexit %d\n--- stdout\n%s--- stderr\n%s", tc.args, code, out.String(), errOut.String())
			golden.Check(t, "testdata/commands/"+name+".txt", []byte(got))
		})
	}
}

// TestValidateCommandGivesTheValidatorsMessages runs validate over the admission cases: every
// invalid document's expected error is printed as FILE:LINE: KIND/NAME: pointer: message.
func TestValidateCommandGivesTheValidatorsMessages(t *testing.T) {
	validate := func(path string) (string, int) {
		var out bytes.Buffer
		code := execute(context.Background(), []string{"evalsi-operator", "validate", "-f", path}, nil, &out, &out)
		return out.String(), code
	}
	out, code := validate("testdata/admission/invalid.yaml")
	if code != 1 {
		t.Fatalf("exit %d for invalid specs, want 1", code)
	}
	docs, err := manifest.Read("testdata/admission/invalid.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		want := fmt.Sprintf("%s: %s/%s: %s\n", d.Where(), d.Object.GetKind(), d.Object.GetName(), d.Object.GetAnnotations()["test.evals.si/expect"])
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if out, code := validate("testdata/admission/valid.yaml"); code != 0 {
		t.Errorf("exit %d for valid specs, want 0:\n%s", code, out)
	}
	if _, code := validate("testdata/admission/missing.yaml"); code != 2 {
		t.Errorf("exit %d for a missing file, want 2", code)
	}
}

// TestWebhookChecksCABundleOften: the webhook command checks its configurations' caBundle every
// few minutes at most, so a caBundle someone reset does not leave a fail-closed webhook broken
// until the next certificate renewal (a month, once).
func TestWebhookChecksCABundleOften(t *testing.T) {
	for _, f := range webhookCommand().Flags {
		if d, ok := f.(*cli.DurationFlag); ok && d.Name == "check-interval" {
			if d.Value <= 0 || d.Value > 5*time.Minute {
				t.Errorf("--check-interval defaults to %s, want at most 5m", d.Value)
			}
			return
		}
	}
	t.Error("the webhook command has no --check-interval")
}

// TestProductLinksNoDevelopmentCode holds the operator's binary to what it runs in a cluster: it
// links neither the local control plane (package cluster, which builds Kubernetes from source),
// nor the development environment, nor the reference evalsid's fault injection.
func TestProductLinksNoDevelopmentCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "evals.si/operator/reconcile") {
		t.Fatalf("go list -deps lacks the engine: %v", deps)
	}
	for _, dev := range []string{"evals.si/operator/cluster", "evals.si/operator/cluster/clustertest", "evals.si/operator/cmd/evalsi-dev/devenv", "evals.si/operator/evalsid/evalsidtest"} {
		if slices.Contains(deps, dev) {
			t.Errorf("the operator's binary links %s", dev)
		}
	}
}
