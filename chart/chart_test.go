// Package chart_test checks the three Helm charts: lint, golden renderings, and installs on the
// real control plane with the operator running under the charts' own service accounts.
package chart_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"evals.si/operator/cluster"
	vocabulary "evals.si/operator/evalsi"
	"evals.si/operator/internal/golden"
)

// charts and the values files that matter for each (testdata/chart/values/<chart>-<case>.yaml).
var charts = map[string][]string{
	"evalsi-crds":     {"default", "cert-manager", "dry-run", "tenants"},
	"evalsi":          {"default", "external-evalsid", "runs-only", "monitoring", "plain-metrics", "mtls-secrets", "mtls-cert-manager"},
	"evalsi-sandboxd": {"default", "custom"},
}

// release names and namespaces the charts are rendered and installed with.
var releases = map[string][2]string{
	"evalsi-crds":     {"evalsi-crds", "evalsi-system"},
	"evalsi":          {"evalsi", "team-a"},
	"evalsi-sandboxd": {"evalsi-sandboxd", "evalsi-system"},
}

var helmBin string

// helmPath returns the helm binary, built into the cache on first use.
func helmPath(t testing.TB) string {
	t.Helper()
	if helmBin == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		var err error
		if helmBin, err = cluster.Helm(ctx, os.Stderr); err != nil {
			t.Fatal(err)
		}
	}
	return helmBin
}

// helmCommand is helm with args, and a home of its own.
func helmCommand(t testing.TB, args ...string) *exec.Cmd {
	cmd := exec.Command(helmPath(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	return cmd
}

// helm runs helm and returns its standard output; a failure fails the test.
func helm(t testing.TB, args ...string) string {
	t.Helper()
	cmd := helmCommand(t, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// helmErr runs helm and returns its output and error, for commands that should fail.
func helmErr(t testing.TB, args ...string) (string, error) {
	out, err := helmCommand(t, args...).CombinedOutput()
	return string(out), err
}

func valuesArgs(chart, c string) []string {
	if c == "default" {
		return nil
	}
	return []string{"-f", filepath.Join("..", "testdata", "chart", "values", chart+"-"+c+".yaml")}
}

// TestValuesAreChecked renders the charts with values a user might get wrong: each fails at
// template time with a message naming the value.
func TestValuesAreChecked(t *testing.T) {
	for name, tc := range map[string]struct {
		chart string
		args  []string
		want  string
	}{
		"misspelt key":              {"evalsi", []string{"--set", "operator.replica=3"}, "replica"},
		"wrong type":                {"evalsi", []string{"--set-string", "operator.replicas=two"}, "replicas"},
		"unknown log level":         {"evalsi-sandboxd", []string{"--set", "operator.logLevel=verbose"}, "logLevel"},
		"cert-manager, no issuer":   {"evalsi-crds", []string{"--set", "webhook.certManager.enabled=true"}, "webhook.certManager.issuerRef.name"},
		"no evalsid and no api.url": {"evalsi", []string{"--set", "evalsid.enabled=false"}, "api.url: with evalsid.enabled=false"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := helmErr(t, append([]string{"template", "x", tc.chart, "--kube-version", "1.37.0"}, tc.args...)...)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("helm template %v: %v, want a failure naming %q:\n%s", tc.args, err, tc.want, out)
			}
		})
	}
}

func TestChartsLint(t *testing.T) {
	for chart, cases := range charts {
		for _, c := range cases {
			helm(t, append([]string{"lint", "--strict", "--kube-version", "1.37.0", chart}, valuesArgs(chart, c)...)...)
		}
	}
}

// TestGoldenCharts renders each chart with each values file and compares the stream with
// testdata/chart/<chart>/<case>.yaml.
func TestGoldenCharts(t *testing.T) {
	for chart, cases := range charts {
		for _, c := range cases {
			t.Run(chart+"/"+c, func(t *testing.T) {
				rel := releases[chart]
				args := append([]string{"template", rel[0], chart, "-n", rel[1], "--kube-version", "1.37.0", "--include-crds"}, valuesArgs(chart, c)...)
				out := helm(t, args...)
				golden.Check(t, filepath.Join("..", "testdata", "chart", chart, c+".yaml"), []byte(out))
			})
		}
	}
}

// Each chart admits exactly the Kubernetes minor the operator supports: helm refuses 1.36 and 1.38.
func TestChartsAdmitOnlyTheSupportedMinor(t *testing.T) {
	major, minor, _ := strings.Cut(vocabulary.KubernetesMinor, ".")
	n, err := strconv.Atoi(minor)
	if err != nil {
		t.Fatal(err)
	}
	for chart := range charts {
		for v, ok := range map[string]bool{
			vocabulary.KubernetesMinor + ".0":  true,
			vocabulary.KubernetesMinor + ".9":  true,
			fmt.Sprintf("%s.%d.0", major, n+1): false,
			fmt.Sprintf("%s.%d.5", major, n-1): false,
		} {
			_, err := helmErr(t, "template", "x", chart, "--kube-version", v)
			if (err == nil) != ok {
				t.Errorf("helm template %s --kube-version %s: err=%v, want admitted=%v", chart, v, err, ok)
			}
		}
	}
}
