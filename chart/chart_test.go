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
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/cluster"
	vocabulary "evals.si/operator/evalsi"
	"evals.si/operator/internal/golden"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/reconcile/process"
)

// charts and the values files that matter for each (testdata/chart/values/<chart>-<case>.yaml).
var charts = map[string][]string{
	"evalsi-crds":     {"default", "monitoring", "cert-manager", "dry-run", "tenants", "sandboxd", "rbac-helpers", "keda-queue-reader"},
	"evalsi":          {"default", "alone", "reference-evalsid", "external-evalsid", "runs-only", "monitoring", "metrics-client-ca", "plain-metrics", "mtls-secrets", "mtls-cert-manager", "workload-certificates"},
	"evalsi-sandboxd": {"default", "custom"},
}

// release names and namespaces the charts are rendered and installed with.
var releases = map[string][2]string{
	"evalsi-crds":     {"evalsi-crds", "evalsi-system"},
	"evalsi":          {"evalsi", "team-a"},
	"evalsi-sandboxd": {"evalsi-sandboxd", "evalsi-sandbox"},
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
		"misspelt key":                                                  {"evalsi", []string{"--set", "operator.replica=3"}, "replica"},
		"wrong type":                                                    {"evalsi", []string{"--set-string", "operator.replicas=two"}, "replicas"},
		"unknown log level":                                             {"evalsi-sandboxd", []string{"--set", "operator.logLevel=verbose", "--set", "operator.apiURL=https://evalsid.example"}, "logLevel"},
		"sandboxd without evalsid's URL":                                {"evalsi-sandboxd", nil, "operator.apiURL: give the URL of the platform's evalsid, over https"},
		"sandboxd over plain HTTP":                                      {"evalsi-sandboxd", []string{"--set", "operator.apiURL=http://evalsid.evalsi.svc:8080"}, "apiURL"},
		"sandboxd with a CA Secret that is no name":                     {"evalsi-sandboxd", []string{"--set", "operator.apiURL=https://evalsid.example", "--set", "operator.apiCASecret=Evalsid CA"}, "apiCASecret"},
		"lease duration below a second":                                 {"evalsi", []string{"--set", "api.url=https://evalsid.platform.svc", "--set", "operator.leaseDuration=1500ms"}, "leaseDuration"},
		"cert-manager, no issuer":                                       {"evalsi-crds", []string{"--set", "webhook.certManager.enabled=true", "--set", "webhook.callers.cidrs={10.0.0.1/32}"}, "webhook.certManager.issuerRef.name"},
		"a webhook answering no one in particular":                      {"evalsi-crds", nil, "webhook.callers: say who may ask the webhook"},
		"a webhook answering any certificate of a CA":                   {"evalsi-crds", []string{"--set", "webhook.callers.clientCAConfigMap=apiserver-ca"}, "webhook.callers.clientNames"},
		"a webhook answering anyone":                                    {"evalsi-crds", []string{"--set", "webhook.callers.anyone=true"}, "anyone"},
		"no api.url":                                                    {"evalsi", nil, "api.url: give the URL of the platform's evalsid, which runs the evaluations; or, for a trial with simulated results, set referenceEvalsid.enabled=true"},
		"an outside evalsid, no CIDRs":                                  {"evalsi", []string{"--set", "api.url=https://evalsid.evals.example"}, "api.networkPeers: evalsid at https://evalsid.evals.example is outside the cluster"},
		"Prometheus, saying nothing of how it proves itself":            {"evalsi", []string{"--set", "api.url=https://evalsid.platform.svc", "--set", "prometheus.enabled=true", "--set", "metrics.secure=true"}, "metrics.clientCA"},
		"secured metrics without a scrapers' CA":                        {"evalsi", []string{"--set", "api.url=https://evalsid.platform.svc", "--set", "metrics.secure=true"}, "metrics.secure: secured metrics check scrapers by client certificate"},
		"Prometheus's token sent to a team's Service":                   {"evalsi", []string{"--set", "api.url=https://evalsid.platform.svc", "--set", "metrics.scraperToken=true"}, "scraperToken"},
		"sandboxd's Prometheus, saying nothing of how it proves itself": {"evalsi-sandboxd", []string{"--set", "operator.apiURL=https://evalsid.example", "--set", "prometheus.enabled=true"}, "metrics.clientCA: say how Prometheus proves itself"},
		"a scrapers' CA, no client certificate":                         {"evalsi", []string{"--set", "api.url=https://evalsid.platform.svc", "--set", "prometheus.enabled=true", "--set", "metrics.secure=true", "--set", "metrics.clientCA.configMap=scrapers", "--set", "metrics.clientCA.names={prometheus}"}, "prometheus.clientCertSecret"},
		"a scrapers' CA, no names":                                      {"evalsi", []string{"--set", "api.url=https://evalsid.platform.svc", "--set", "metrics.secure=true", "--set", "metrics.clientCA.configMap=scrapers"}, "metrics.clientCA.names"},
		"a team's operator reviewing tokens":                            {"evalsi-crds", []string{"--set", "webhook.callers.cidrs={10.0.0.1/32}", "--set", "metricsAuth.operatorNamespaces={team-a}"}, "operatorNamespaces"},
		"api.url and the reference evalsid":                             {"evalsi", []string{"--set", "api.url=https://evalsid.platform.svc", "--set", "referenceEvalsid.enabled=true"}, "api.url and referenceEvalsid.enabled: set one"},
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
				args := []string{"template", rel[0], chart, "-n", rel[1], "--kube-version", "1.37.0", "--include-crds"}
				if c != "alone" {
					// As on a cluster where the CRDs and KEDA are served (an upgrade), so that
					// objects of the evals.si kinds render and the operator's Role grants them;
					// "alone" is the evalsi chart on a cluster without either.
					args = append(args, "--api-versions", "evals.si/v1alpha1", "--api-versions", "evals.si/v1alpha1/SandboxClass", "--api-versions", "keda.sh/v1alpha1", "--api-versions", "keda.sh/v1alpha1/ClusterTriggerAuthentication")
				}
				args = append(args, valuesArgs(chart, c)...)
				out := helm(t, args...)
				golden.Check(t, filepath.Join("..", "testdata", "chart", chart, c+".yaml"), []byte(out))
			})
		}
	}
}

// clusterScoped are the kinds the charts could make that have no namespace.
var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "SandboxClass": true, "CustomResourceDefinition": true,
	"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true, "ValidatingAdmissionPolicy": true,
	"ValidatingAdmissionPolicyBinding": true, "MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
	"PriorityClass": true, "StorageClass": true, "PersistentVolume": true, "RuntimeClass": true,
}

// TestSandboxdChartIsNamespaced renders evalsi-sandboxd with each values file: it holds only
// namespaced objects, all in its release's namespace (the sandbox namespace); evalsi-crds holds
// the rest.
func TestSandboxdChartIsNamespaced(t *testing.T) {
	for _, c := range charts["evalsi-sandboxd"] {
		out := helm(t, append([]string{"template", "evalsi-sandboxd", "evalsi-sandboxd", "-n", "evalsi-sandbox", "--kube-version", "1.37.0",
			"--api-versions", "evals.si/v1alpha1/SandboxClass"}, valuesArgs("evalsi-sandboxd", c)...)...)
		docs, err := manifest.Decode("evalsi-sandboxd", strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		if len(docs) == 0 {
			t.Fatalf("%s: no objects", c)
		}
		for _, d := range docs {
			if clusterScoped[d.Object.GetKind()] {
				t.Errorf("%s: %s %s is cluster-scoped", c, d.Object.GetKind(), d.Object.GetName())
			}
			if ns := d.Object.GetNamespace(); ns != "evalsi-sandbox" {
				t.Errorf("%s: %s %s is in namespace %q, not the release's", c, d.Object.GetKind(), d.Object.GetName(), ns)
			}
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
			_, err := helmErr(t, append([]string{"template", "x", chart, "--kube-version", v}, valuesArgs(chart, "default")...)...)
			if (err == nil) != ok {
				t.Errorf("helm template %s --kube-version %s: err=%v, want admitted=%v", chart, v, err, ok)
			}
		}
	}
}

// TestChartNamesTheOperatorsLeases: the uninstall hook may get and delete exactly the Leases the
// operator's replicas write (process.OperatorLeases), for one shard and for several, so that
// nothing of the operator's is left and no other Lease is touched.
func TestChartNamesTheOperatorsLeases(t *testing.T) {
	for _, shards := range []int{1, 3} {
		out := helm(t, "template", "evalsi", "evalsi", "-n", "team-a", "--kube-version", "1.37.0", "--api-versions", "evals.si/v1alpha1",
			"--set", "referenceEvalsid.enabled=true",
			"--set", "operator.shards="+strconv.Itoa(shards), "--show-only", "templates/uninstall.yaml")
		docs, err := manifest.Decode("uninstall.yaml", strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range docs {
			if d.Object.GetKind() != "Role" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(d.Object.Object, "rules")
			for _, r := range rules {
				rule := r.(map[string]any)
				if groups, _ := rule["apiGroups"].([]any); len(groups) == 1 && groups[0] == "coordination.k8s.io" {
					for _, n := range rule["resourceNames"].([]any) {
						names = append(names, n.(string))
					}
				}
			}
		}
		want := process.OperatorLeases(vocabulary.LeaderElectionID, shards)
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("%d shards: the hook's Role names Leases %v, want %v", shards, names, want)
		}
	}
}
