package chart_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"evals.si/operator/cluster"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/internal/pki"
	"evals.si/operator/reconcile/engine"
	"evals.si/operator/reconcile/process"
	"evals.si/operator/webhook"
)

// dashboard is what the test reads of a Grafana dashboard.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr       string `json:"expr"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboardReadsOnlyExportedMetrics renders each chart's dashboard ConfigMap (monitoring on)
// and holds its queries to what its program serves: every metric a query reads is one the
// program's registry describes (the operator's: the engine's metrics, the shards held and their
// moves, the certificates' expiry, the Go and process collectors; the webhook's: its reviews, the
// serving certificate's expiry, the Go and process collectors) or Prometheus's own `up`; every
// query parses as PromQL (promtool check rules, with Grafana's variables given values); and the
// rules of Grafana's dashboard linter that apply here hold: a datasource variable every panel
// and target uses, a namespace variable, each query selecting the namespace and the chart's
// scrape job and taking rates over $__rate_interval, a title and a unit on each panel, and
// unique panel ids.
func TestDashboardReadsOnlyExportedMetrics(t *testing.T) {
	operator := engine.NewMetrics().Registry
	operator.MustRegister(process.ShardsHeldMetric(func() float64 { return 0 }), process.ShardMovesMetric(2), pki.Expiry{})
	hook := webhook.NewMetrics().Registry
	hook.MustRegister(pki.ServedExpiry{Name: "webhook-serving"})
	for _, c := range []struct {
		chart, release, namespace, key, job string
		registry                            *prometheus.Registry
	}{
		{"evalsi", "evalsi", "team-a", "evalsi-operator.json", "evalsi-operator-metrics", operator},
		{"evalsi-crds", "evalsi-crds", "evalsi-system", "evalsi-webhook.json", "evalsi-webhook-metrics", hook},
	} {
		t.Run(c.chart, func(t *testing.T) {
			checkDashboard(t, c.chart, c.release, c.namespace, c.key, c.job, c.registry)
		})
	}
}

// checkDashboard is TestDashboardReadsOnlyExportedMetrics for one chart: its dashboard, under
// key of its ConfigMap, scraped by job, of the program whose metrics registry describes.
func checkDashboard(t *testing.T, chart, release, namespace, key, job string, registry *prometheus.Registry) {
	out := helm(t, append([]string{"template", release, chart, "-n", namespace, "--kube-version", "1.37.0",
		"--show-only", "templates/dashboard.yaml"}, valuesArgs(chart, "monitoring")...)...)
	docs, err := manifest.Decode("dashboard.yaml", strings.NewReader(out))
	if err != nil || len(docs) != 1 || docs[0].Object.GetKind() != "ConfigMap" {
		t.Fatalf("the chart's dashboard: %v, %d documents", err, len(docs))
	}
	if got := docs[0].Object.GetLabels()["grafana_dashboard"]; got != "1" {
		t.Errorf("label grafana_dashboard = %q, want \"1\" (the sidecar's default)", got)
	}
	data, _ := docs[0].Object.Object["data"].(map[string]any)
	raw, _ := data[key].(string)
	var d dashboard
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}

	exported := map[string]bool{"up": true}
	descs := make(chan *prometheus.Desc)
	go func() { registry.Describe(descs); close(descs) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for desc := range descs {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			exported[m[1]] = true
		}
	}

	variables := map[string]string{}
	for _, v := range d.Templating.List {
		variables[v.Name] = v.Type
	}
	if variables["datasource"] != "datasource" || variables["namespace"] != "query" {
		t.Errorf("templating variables %v, want a datasource variable datasource and a query variable namespace", variables)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed for the sidecar to keep one dashboard", d.UID, d.Title)
	}
	metricName := regexp.MustCompile(`\b([a-z_:][a-z0-9_:]*)\{`)
	ids := map[int]bool{}
	var rules []map[string]any
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || p.FieldConfig.Defaults.Unit == "" || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %d %q: title, unit, datasource ${datasource} and a target are each needed", p.ID, p.Title)
		}
		for _, target := range p.Targets {
			expr := target.Expr
			if target.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a target's datasource is %q, want ${datasource}", p.Title, target.Datasource.UID)
			}
			if !strings.Contains(expr, `namespace="$namespace", job="`+job+`"`) {
				t.Errorf("panel %q: %s selects another namespace or job than the variable's and the chart's", p.Title, expr)
			}
			if strings.Contains(expr, "rate(") && !strings.Contains(expr, "[$__rate_interval]") {
				t.Errorf("panel %q: %s takes a rate over a fixed window, not $__rate_interval", p.Title, expr)
			}
			names := metricName.FindAllStringSubmatch(expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %s reads no metric", p.Title, expr)
			}
			for _, m := range names {
				name := m[1]
				if base, ok := histogramOf(name); ok && exported[base] {
					continue
				}
				if !exported[name] {
					t.Errorf("panel %q reads %s, which %s does not export", p.Title, name, chart)
				}
			}
			expr = strings.NewReplacer("$namespace", "team-a", "$__rate_interval", "2m").Replace(expr)
			rules = append(rules, map[string]any{"record": fmt.Sprintf("dashboard:panel_%d:%d", p.ID, len(rules)), "expr": expr})
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	promtool, err := cluster.Promtool(ctx, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	file, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	if report, err := exec.CommandContext(ctx, promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("the dashboard's queries do not parse: %v\n%s", err, report)
	}
}

// histogramOf returns the histogram a series name is one of the parts of (its _bucket, _count or
// _sum), and whether it is one.
func histogramOf(name string) (string, bool) {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			return base, true
		}
	}
	return "", false
}
