package chart_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"evals.si/operator/cluster"
	"evals.si/operator/internal/manifest"
)

// TestAlertRules renders each chart's alerts with monitoring on (the evalsi chart's as a release
// in team-a, evalsi-crds's webhook alerts in evalsi-system) and runs Prometheus's own unit tests
// of them (promtool test rules, testdata/alerts/<chart>.yaml): each alert fires on series that
// mean trouble and stays quiet on a healthy operator's or webhook's. Every metric the rules read
// is one the operator's code defines, and every alert's runbook_url is a section of
// docs/runbooks.md named like it.
func TestAlertRules(t *testing.T) {
	for _, tc := range []struct{ chart, template, tests string }{
		{"evalsi", "templates/alerts.yaml", "evalsi.yaml"},
		{"evalsi-crds", "templates/monitoring.yaml", "evalsi-webhook.yaml"},
	} {
		t.Run(tc.chart, func(t *testing.T) {
			rel := releases[tc.chart]
			out := helm(t, append([]string{"template", rel[0], tc.chart, "-n", rel[1], "--kube-version", "1.37.0",
				"--show-only", tc.template}, valuesArgs(tc.chart, "monitoring")...)...)
			checkAlertRules(t, out, tc.tests)
		})
	}
}

// checkAlertRules runs promtool's tests (testdata/alerts/tests) of the PrometheusRule in out, and
// checks that each alert has a firing and a quiet case and reads only metrics the operator
// defines.
func checkAlertRules(t *testing.T, out, testsFile string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	promtool, err := cluster.Promtool(ctx, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifest.Decode("alerts.yaml", strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var rule *manifest.Document
	for i := range docs {
		if docs[i].Object.GetKind() == "PrometheusRule" {
			rule = &docs[i]
		}
	}
	if rule == nil {
		t.Fatalf("no PrometheusRule in:\n%s", out)
	}
	rules, err := yaml.Marshal(map[string]any{"groups": rule.Object.Object["spec"].(map[string]any)["groups"]})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tests, err := os.ReadFile(filepath.Join("..", "testdata", "alerts", testsFile))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"rules.yaml": rules, "tests.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if report, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, report)
	}

	// Each alert is tested, firing and quiet.
	for _, alert := range regexp.MustCompile(`(?m)^\s+- alert: (\w+)`).FindAllStringSubmatch(out, -1) {
		if !strings.Contains(string(tests), "alertname: "+alert[1]+"\n        exp_alerts:\n          - exp_labels") {
			t.Errorf("alert %s has no firing case in testdata/alerts/%s", alert[1], testsFile)
		}
		if !strings.Contains(string(tests), "alertname: "+alert[1]+"\n        exp_alerts: []") {
			t.Errorf("alert %s has no quiet case in testdata/alerts/%s", alert[1], testsFile)
		}
	}
	// Each alert points at its own section of the runbooks.
	runbooks, err := os.ReadFile(filepath.Join("..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range rule.Object.Object["spec"].(map[string]any)["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			name, _ := r["alert"].(string)
			annotations, _ := r["annotations"].(map[string]any)
			url, _ := annotations["runbook_url"].(string)
			if !strings.HasSuffix(url, "/docs/runbooks.md#"+strings.ToLower(name)) {
				t.Errorf("alert %s: runbook_url %q, want docs/runbooks.md#%s", name, url, strings.ToLower(name))
			}
			if !strings.Contains(string(runbooks), "\n## "+name+"\n") {
				t.Errorf("alert %s has no section in docs/runbooks.md", name)
			}
		}
	}
	// Each metric the rules read is defined by the operator's code.
	var sources strings.Builder
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		sources.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`evalsi_[a-z_]+`).FindAllString(string(rules), -1) {
		name := strings.TrimSuffix(m, "_bucket")
		if !strings.Contains(sources.String(), `"`+name+`"`) {
			t.Errorf("the alerts read %s, which the operator does not define", m)
		}
	}
}
