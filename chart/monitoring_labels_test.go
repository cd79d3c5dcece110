package chart_test

import (
	"strings"
	"testing"

	"evals.si/operator/internal/manifest"
)

// TestMonitoringObjectsCarryTheirLabels renders each chart's ServiceMonitors and PrometheusRules
// with prometheus.labels and .annotations: every one carries them, so that a Prometheus that
// selects by label (kube-prometheus-stack selects release: <its release>) picks them up.
func TestMonitoringObjectsCarryTheirLabels(t *testing.T) {
	for chart, args := range map[string][]string{
		"evalsi":          {"--set", "api.url=https://evalsid.evalsi-platform.svc", "--set", "metrics.secure=true", "--set", "metrics.clientCA.configMap=scrapers", "--set", "metrics.clientCA.names={prometheus}", "--set", "prometheus.clientCertSecret=prometheus-client-tls"},
		"evalsi-crds":     {"--set", "webhook.callers.cidrs={10.0.0.1/32}"},
		"evalsi-sandboxd": {"--set", "operator.apiURL=https://evalsid.example", "--set", "metrics.scraperToken=true"},
	} {
		t.Run(chart, func(t *testing.T) {
			rel := releases[chart]
			out := helm(t, append([]string{"template", rel[0], chart, "-n", rel[1], "--kube-version", "1.37.0",
				"--set", "prometheus.enabled=true", "--set", "prometheus.labels.release=kube-prometheus-stack",
				"--set", "prometheus.annotations.owner=platform"}, args...)...)
			docs, err := manifest.Decode("helm template", strings.NewReader(out))
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, d := range docs {
				o := d.Object
				if k := o.GetKind(); k != "ServiceMonitor" && k != "PrometheusRule" {
					continue
				}
				seen++
				if o.GetLabels()["release"] != "kube-prometheus-stack" || o.GetAnnotations()["owner"] != "platform" {
					t.Errorf("%s %s: labels %v, annotations %v; want prometheus.labels and .annotations", o.GetKind(), o.GetName(), o.GetLabels(), o.GetAnnotations())
				}
			}
			if seen == 0 {
				t.Error("no ServiceMonitor or PrometheusRule rendered")
			}
		})
	}
}
