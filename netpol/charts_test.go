package netpol

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"evals.si/operator/internal/manifest"
)

// chartPolicies reads the NetworkPolicies and the pod labels of each Deployment of a chart's
// golden rendering (testdata/chart/<chart>/<case>.yaml, which TestGoldenCharts keeps equal to
// what helm renders), by Deployment name.
func chartPolicies(t *testing.T, chart, c string) ([]*networkingv1.NetworkPolicy, map[string]map[string]string) {
	t.Helper()
	path := filepath.Join("..", "testdata", "chart", chart, c+".yaml")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	docs, err := manifest.Decode(path, f)
	if err != nil {
		t.Fatal(err)
	}
	var policies []*networkingv1.NetworkPolicy
	pods := map[string]map[string]string{}
	for _, d := range docs {
		switch d.Object.GetKind() {
		case "NetworkPolicy":
			var np networkingv1.NetworkPolicy
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object.Object, &np); err != nil {
				t.Fatal(err)
			}
			policies = append(policies, &np)
		case "Deployment":
			pods[d.Object.GetName()], _, _ = unstructured.NestedStringMap(d.Object.Object, "spec", "template", "metadata", "labels")
		}
	}
	return policies, pods
}

// TestChartNetworkPolicyMatrix asks the engine about the NetworkPolicies the three charts render
// for the platform's own pods (values with the API server's address named): the operator, the
// in-chart evalsid and sandbox pool (evalsi), the webhook (evalsi-crds) and sandboxd
// (evalsi-sandboxd). Each reaches the API server, DNS and what its purpose needs, nothing public,
// no other resolver and no metadata endpoint; the webhook answers only the API server's
// addresses, the metrics only the monitoring namespace, the in-chart evalsid only its namespace
// and KEDA.
func TestChartNetworkPolicyMatrix(t *testing.T) {
	var policies []*networkingv1.NetworkPolicy
	labels := map[string]map[string]string{}
	for _, c := range [][2]string{{"evalsi", "reference-evalsid"}, {"evalsi-crds", "default"}, {"evalsi-sandboxd", "custom"}} {
		ps, pods := chartPolicies(t, c[0], c[1])
		policies = append(policies, ps...)
		for name, l := range pods {
			labels[c[0]+"/"+name] = l
		}
	}
	pod := func(chart, deployment string) map[string]string {
		l, ok := labels[chart+"/"+deployment]
		if !ok {
			t.Fatalf("%s renders no Deployment %s", chart, deployment)
		}
		return l
	}
	engine := matcher.BuildNetworkPolicies(false, policies)
	pods := map[string]endpoint{
		"operator":       {"team-a", pod("evalsi", "evalsi-operator"), "10.244.1.2"},
		"evalsid":        {"team-a", pod("evalsi", "evalsid"), "10.244.1.3"},
		"sandbox":        {"team-a", pod("evalsi", "evalsi-sandbox"), "10.244.1.4"},
		"team-a's pod":   {"team-a", map[string]string{"app": "notebook"}, "10.244.1.9"},
		"webhook":        {"evalsi-system", pod("evalsi-crds", "evalsi-webhook"), "10.244.2.2"},
		"sandboxd":       {"evalsi-sandbox", pod("evalsi-sandboxd", "evalsi-sandboxd"), "10.244.3.2"},
		"prometheus":     {"monitoring", map[string]string{"app.kubernetes.io/name": "prometheus"}, "10.244.4.2"},
		"keda":           {"keda", map[string]string{"app": "keda-operator"}, "10.244.5.2"},
		"team-b's pod":   {"team-b", map[string]string{"app": "notebook"}, "10.244.6.2"},
		"kube-dns":       {"kube-system", map[string]string{"k8s-app": "kube-dns"}, "10.244.0.10"},
		"the API server": {ip: "10.0.0.1"},
		"a node":         {ip: "10.0.0.7"},
		"a public host":  {ip: "18.164.174.55"},
		"a public DNS":   {ip: "8.8.8.8"},
		"metadata":       {ip: "169.254.169.254"},
	}
	check(t, engine, pods, map[conn]bool{
		// The operator: the API server, its evalsid, DNS; scraped from monitoring alone.
		tcp("operator", "the API server", 443):  true,
		tcp("operator", "a node", 443):          false,
		tcp("operator", "a public host", 443):   false,
		tcp("operator", "metadata", 80):         false,
		tcp("operator", "evalsid", 8080):        true,
		tcp("operator", "team-a's pod", 8080):   false,
		tcp("operator", "kube-dns", 53):         true,
		{"operator", "a public DNS", 53, "UDP"}: false,
		tcp("prometheus", "operator", 8443):     true,
		tcp("team-a's pod", "operator", 8443):   false,
		tcp("team-b's pod", "operator", 8443):   false,
		// The in-chart evalsid: called by its namespace's pods (the pools, the operator) and KEDA.
		tcp("team-a's pod", "evalsid", 8080):  true,
		tcp("keda", "evalsid", 8080):          true,
		tcp("team-b's pod", "evalsid", 8080):  false,
		tcp("prometheus", "evalsid", 8080):    false,
		tcp("evalsid", "the API server", 443): true,
		tcp("evalsid", "a public host", 443):  false,
		tcp("evalsid", "metadata", 80):        false,
		// The in-chart sandbox pool: its evalsid and DNS.
		tcp("sandbox", "evalsid", 8080):       true,
		tcp("sandbox", "kube-dns", 53):        true,
		tcp("sandbox", "the API server", 443): false,
		tcp("sandbox", "a public host", 443):  false,
		tcp("team-a's pod", "sandbox", 8080):  false,
		// The webhook: reviews from the API server's addresses alone.
		tcp("the API server", "webhook", 9443): true,
		tcp("team-a's pod", "webhook", 9443):   false,
		tcp("team-b's pod", "webhook", 9443):   false,
		tcp("webhook", "the API server", 443):  true,
		tcp("webhook", "a public host", 443):   false,
		{"webhook", "a public DNS", 53, "UDP"}: false,
		// sandboxd: the API server and DNS; scraped from monitoring alone.
		tcp("sandboxd", "the API server", 6443): true,
		tcp("sandboxd", "a public host", 443):   false,
		tcp("sandboxd", "metadata", 80):         false,
		tcp("prometheus", "sandboxd", 8080):     true,
		tcp("team-a's pod", "sandboxd", 8080):   false,
	}, map[string]map[int]string{
		"operator": {8443: "metrics", 8081: "health"},
		"evalsid":  {8080: "api"},
		"webhook":  {9443: "https", 8081: "health"},
		"sandboxd": {8080: "metrics", 8081: "health"},
	})
}
