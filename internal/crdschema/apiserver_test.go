package crdschema

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/manifest"
	"evals.si/operator/internal/specgen"
	"evals.si/operator/schemas"
)

// shared is a control plane with the chart's CRDs and no admission webhook: what the API server
// itself refuses.
var shared = clustertest.New(cluster.Options{CRDDirs: []string{"../../chart/evalsi-crds/files/crds"}})

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// TestKubectlExplainDescribesEverySpecField runs `kubectl explain KIND.spec --recursive` and
// `kubectl explain KIND.spec.FIELD` for every field of every kind's spec, on the test control
// plane: each field is listed, and each prints the description its schema gives it.
func TestKubectlExplainDescribesEverySpecField(t *testing.T) {
	c := shared.Get(t)
	src, err := Read("../../apiclient/proto/evalsi/v1")
	if err != nil {
		t.Fatal(err)
	}
	explain := func(what string, args ...string) string {
		t.Helper()
		out, err := exec.Command(c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig, "explain", what}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl explain %s: %v\n%s", what, err, out)
		}
		return string(out)
	}
	for _, k := range evalsi.Kinds {
		t.Run(k.Kind, func(t *testing.T) {
			spec, err := src.Spec(k.Kind)
			if err != nil {
				t.Fatal(err)
			}
			resource := strings.ToLower(k.Kind)
			var recursive string
			clustertest.Eventually(t, context.Background(), "the CRD's schema published", func() error {
				out, err := exec.Command(c.Kubectl, "--kubeconfig", c.Kubeconfig, "explain", resource+".spec", "--recursive").CombinedOutput()
				recursive = string(out)
				if err != nil || !strings.Contains(recursive, "FIELDS:") {
					return fmt.Errorf("%v: %s", err, out)
				}
				return nil
			})
			props, _ := spec["properties"].(map[string]any)
			for name, p := range props {
				if !strings.Contains(recursive, "\n  "+name+"\t") {
					t.Errorf("kubectl explain %s.spec --recursive lists no %s:\n%s", resource, name, recursive)
				}
				want := strings.Fields(p.(map[string]any)["description"].(string))
				got := strings.Fields(explain(resource + ".spec." + name))
				if !strings.Contains(strings.Join(got, " "), strings.Join(want, " ")) {
					t.Errorf("kubectl explain %s.spec.%s does not print its description %q:\n%s", resource, name, strings.Join(want, " "), strings.Join(got, " "))
				}
			}
		})
	}
}

// TestAPIServerRefusesNothingValidateAccepts creates (dryRun=All) the spec of every evals.si
// object of testdata that the JSON schemas accept, and every generated spec they accept, on an API server
// with the CRDs and no webhook: the CRDs' schemas, which carry types for kubectl explain, refuse
// none of them, nor an integer written as 2.0 or a quantity written as a number.
func TestAPIServerRefusesNothingValidateAccepts(t *testing.T) {
	c := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "crd-schemas"
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checked, refused := map[string]int{}, 0
	check := func(what string, obj *unstructured.Unstructured) {
		if schemas.Validate(obj) != nil {
			return
		}
		k, ok := evalsi.KindNamed(obj.GetKind())
		if !ok {
			return
		}
		// The spec alone is judged: the case's own metadata may be what a case refuses.
		n := 0
		for _, v := range checked {
			n += v
		}
		obj = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": k.Kind,
			"metadata": map[string]any{"name": fmt.Sprintf("case-%d", n)}, "spec": obj.Object["spec"]}}
		ri := c.Dynamic().Resource(k.Resource)
		var err error
		if k.Namespaced {
			_, err = ri.Namespace(ns).Create(ctx, withNamespace(obj, ns), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		} else {
			_, err = ri.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		}
		checked[k.Kind]++
		if err != nil {
			refused++
			spec, _ := json.Marshal(obj.Object["spec"])
			t.Errorf("%s: the API server refused what validation accepts: %v\nspec: %s", what, err, spec)
		}
	}

	paths := []string{"../../testdata/admission", "../../testdata/examples"}
	inputs, err := filepath.Glob("../../testdata/render/*/*/input.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append(paths, inputs...) {
		docs, err := manifest.Read(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			if d.Object.GroupVersionKind().Group == evalsi.Group {
				check(d.Where(), d.Object)
			}
		}
	}
	// What the JSON schemas take that a stricter CRD type would refuse: a whole number written as
	// a float for an integer, a number for a quantity.
	for what, doc := range map[string]string{
		"trials: 2.0": `{apiVersion: evals.si/v1alpha1, kind: EvalRun, metadata: {name: whole-float},
spec: {suite: smoke, target: {checkpointServer: s}, trials: 2.0, concurrency: 1e1}}`,
		"cpu: 0.5": `{apiVersion: evals.si/v1alpha1, kind: Evaluator, metadata: {name: number-quantity},
spec: {resources: {requests: {cpu: 0.5, memory: 1073741824}}}}`,
	} {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatal(err)
		}
		if err := schemas.Validate(&obj); err != nil {
			t.Errorf("validation refused %s, which the JSON schemas take: %v", what, err)
		}
		check(what, &obj)
	}
	for _, kind := range []string{"Evaluator", "SandboxClass", "CheckpointServer"} {
		for seed := range uint64(300) {
			g := specgen.New(seed)
			spec := map[string]func() map[string]any{
				"Evaluator": g.Evaluator, "SandboxClass": g.SandboxClass, "CheckpointServer": g.CheckpointServer,
			}[kind]()
			check(fmt.Sprintf("%s seed %d", kind, seed), &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "evals.si/v1alpha1", "kind": kind,
				"metadata": map[string]any{"name": fmt.Sprintf("gen-%d", seed)}, "spec": spec,
			}})
		}
	}
	t.Logf("created, by kind: %v", checked)
	for _, k := range evalsi.Kinds {
		if checked[k.Kind] == 0 {
			t.Errorf("no %s was checked", k.Kind)
		}
	}
}

// withNamespace is obj in namespace ns.
func withNamespace(obj *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	obj.SetNamespace(ns)
	return obj
}
