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

// TestAlertRules renders the evalsi chart's alerts as a release in team-a with monitoring on and
// runs Prometheus's own unit tests of them (promtool test rules, testdata/alerts/evalsi.yaml):
// each alert fires on series that mean trouble and stays quiet on a healthy operator's. Every
// metric the rules read is one the operator defines.
func TestAlertRules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	promtool, err := cluster.Promtool(ctx, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out := helm(t, append([]string{"template", "evalsi", "evalsi", "-n", "team-a", "--kube-version", "1.37.0",
		"--show-only", "templates/alerts.yaml"}, valuesArgs("evalsi", "monitoring")...)...)
	docs, err := manifest.Decode("alerts.yaml", strings.NewReader(out))
	if err != nil || len(docs) != 1 || docs[0].Object.GetKind() != "PrometheusRule" {
		t.Fatalf("the chart's alerts: %v, %d documents", err, len(docs))
	}
	rules, err := yaml.Marshal(map[string]any{"groups": docs[0].Object.Object["spec"].(map[string]any)["groups"]})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tests, err := os.ReadFile(filepath.Join("..", "testdata", "alerts", "evalsi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"rules.yaml": rules, "evalsi.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, promtool, "test", "rules", "evalsi.yaml")
	cmd.Dir = dir
	if report, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, report)
	}

	// Each alert is tested, firing.
	for _, alert := range regexp.MustCompile(`(?m)^\s+- alert: (\w+)`).FindAllStringSubmatch(out, -1) {
		if !strings.Contains(string(tests), "alertname: "+alert[1]+"\n        exp_alerts:\n          - exp_labels") {
			t.Errorf("alert %s has no firing case in testdata/alerts/evalsi.yaml", alert[1])
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
