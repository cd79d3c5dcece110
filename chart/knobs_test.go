package chart_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/internal/manifest"
)

// TestOperatorKnobs renders the evalsi chart with each knob a platform team reaches for set, and
// finds each where it belongs: pod labels (never over the selector's), extra flags and
// environment, topology spread, the service account's annotations, and the disruption budget.
func TestOperatorKnobs(t *testing.T) {
	out := helm(t, "template", "evalsi", "evalsi", "-n", "team-a", "--kube-version", "1.37.0",
		"--set", "api.url=https://evalsid.evalsi-platform.svc",
		"--set", "operator.podLabels.team=search", "--set", "operator.podLabels.app\\.kubernetes\\.io/name=other",
		"--set", "operator.extraArgs={--run-poll-interval=30s}",
		"--set", "operator.extraEnv[0].name=GOMEMLIMIT", "--set", "operator.extraEnv[0].value=400MiB",
		"--set", "operator.topologySpreadConstraints[0].maxSkew=1",
		"--set", "operator.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
		"--set", "operator.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
		"--set", "operator.serviceAccountAnnotations.iam\\.example/role=evalsi",
		"--set", "operator.podDisruptionBudget.minAvailable=1")
	docs, err := manifest.Decode("helm template", strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	find := func(kind, name string) *unstructured.Unstructured {
		for _, d := range docs {
			if d.Object.GetKind() == kind && d.Object.GetName() == name {
				return d.Object
			}
		}
		t.Fatalf("no %s %s", kind, name)
		return nil
	}
	dep := find("Deployment", "evalsi-operator")
	labels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
	if labels["team"] != "search" || labels["app.kubernetes.io/name"] != "evalsi-operator" {
		t.Errorf("pod labels %v: want team=search added and the selector's name kept", labels)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if args[len(args)-1] != "--run-poll-interval=30s" {
		t.Errorf("args end %q, want the extra flag last", args[len(args)-1])
	}
	if env, _, _ := unstructured.NestedSlice(c, "env"); len(env) != 1 || env[0].(map[string]any)["name"] != "GOMEMLIMIT" {
		t.Errorf("env %v, want GOMEMLIMIT", env)
	}
	if spread, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "topologySpreadConstraints"); len(spread) != 1 {
		t.Errorf("topologySpreadConstraints %v, want one", spread)
	}
	if sa := find("ServiceAccount", "evalsi-operator"); sa.GetAnnotations()["iam.example/role"] != "evalsi" {
		t.Errorf("service account annotations %v", sa.GetAnnotations())
	}
	pdb := find("PodDisruptionBudget", "evalsi-operator")
	if v, ok, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable"); !ok || fmt.Sprint(v) != "1" {
		t.Errorf("PodDisruptionBudget spec %v, want minAvailable 1", pdb.Object["spec"])
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "maxUnavailable"); ok {
		t.Errorf("PodDisruptionBudget spec %v: minAvailable and maxUnavailable together", pdb.Object["spec"])
	}
}
