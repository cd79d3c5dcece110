package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/podproc"
	"evals.si/operator/isolation"
)

// TestSandboxClassShowsIsolation runs a landlock pool's isolation probe for real, under the test
// kubelet, on this machine's kernel: each of the pool's pods (which no node takes, so that KWOK
// leaves their status alone) has its init container run as the kubelet would, confined by the
// security context the operator rendered, and its end written to the pod's status. The class
// then says what is in force in status.isolation (with the Landlock ABI this kernel has, read
// here apart from the probe), in the Isolated condition and in `kubectl get`'s Isolation column.
// When one pod's node has no Landlock (the probe's --without, as the node would), that pod does
// not start and the class turns Ready False, naming what is missing. The test kubelet has no pod
// network: the metadata address is one that drops every connection, as the pool's
// NetworkPolicy makes it (netpol proves the policy).
func TestSandboxClassShowsIsolation(t *testing.T) {
	ctx := testContext(t)
	sandbox := newNamespace(t, ctx, testOptions.SandboxNamespace)
	startEngine(t, Config{Controllers: []string{"sandboxclass"}})
	kubelet := &clustertest.Kubelet{Bin: clustertest.Operator(t)}
	kubelet.Start(t, ctx, env)
	metadata, stop, err := podproc.SilentAddress()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	node := []string{"--reach=" + isolation.MetadataTarget + "=" + metadata}

	create(t, ctx, evalsi.SandboxClasses, "", "SandboxClass", "confined", map[string]any{
		"rung": "landlock", "replicas": int64(2), "allowedNamespaces": map[string]any{}, "nodeSelector": map[string]any{"evals.si/test-node": "none"},
	})
	t.Cleanup(func() { client(evalsi.SandboxClasses, "").Delete(ctx, "confined", metav1.DeleteOptions{}) })
	pods := env.Clientset().CoreV1().Pods(sandbox)
	var list *corev1.PodList
	clustertest.Eventually(t, ctx, "the pool's two pods", func() error {
		if list, err = pods.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=confined"}); err != nil {
			return err
		}
		if len(list.Items) != 2 {
			return fmt.Errorf("%d pods", len(list.Items))
		}
		return nil
	})
	for i := range list.Items {
		if err := kubelet.RunInitContainers(t, ctx, &list.Items[i], node...); err != nil {
			t.Fatal(err)
		}
	}
	isolated := func(status, reason string) {
		t.Helper()
		clustertest.Eventually(t, ctx, "Isolated="+status+"/"+reason, func() error {
			got, err := client(evalsi.SandboxClasses, "").Get(ctx, "confined", metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				c := c.(map[string]any)
				if c["type"] == evalsi.ConditionIsolated && c["status"] == status && c["reason"] == reason {
					return nil
				}
			}
			return fmt.Errorf("conditions %v", conds)
		})
	}
	isolated("True", evalsi.ReasonFloorMet)
	want := fmt.Sprintf("landlock ABI %d; seccomp filter; no_new_privs; no capabilities; metadata unreachable on 2/2 pods", landlockABI(t))
	clustertest.Eventually(t, ctx, "status.isolation and kubectl get's Isolation column "+want, func() error {
		obj, err := client(evalsi.SandboxClasses, "").Get(ctx, "confined", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s, _, _ := unstructured.NestedString(obj.Object, "status", "isolation"); s != want {
			return fmt.Errorf("status.isolation = %q", s)
		}
		if column := tableColumn(t, ctx, "/apis/evals.si/v1alpha1/sandboxclasses/confined", "Isolation"); column != want {
			return fmt.Errorf("kubectl get's Isolation column = %q", column)
		}
		return nil
	})

	// The second pod's node loses Landlock: its probe fails and the class says so.
	cur, err := pods.Get(ctx, list.Items[1].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kubelet.RunInitContainers(t, ctx, cur, append(node, "--without=landlock")...); err != nil {
		t.Fatal(err)
	}
	if cur, err = pods.Get(ctx, cur.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := cur.Status.InitContainerStatuses; len(s) != 1 || s[0].State.Terminated == nil || s[0].State.Terminated.ExitCode != 1 {
		t.Fatalf("the probe on a node without Landlock ended %+v, want exit code 1 (the pod does not start)", s)
	}
	isolated("False", evalsi.ReasonFloorNotMet)
	const missing = "1 of 2 pods miss the landlock floor: missing Landlock (simulated: the node has no Landlock)"
	clustertest.Eventually(t, ctx, "Ready False naming what is missing", func() error {
		obj, err := client(evalsi.SandboxClasses, "").Get(ctx, "confined", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s, r, m := readyCondition(obj); s != "False" || r != evalsi.ReasonFloorNotMet || !strings.HasPrefix(m, missing) {
			return fmt.Errorf("Ready=%s %s (%s)", s, r, m)
		}
		return nil
	})
}

// landlockABI asks this machine's kernel which Landlock ABI it offers, apart from the probe.
func landlockABI(t *testing.T) int {
	t.Helper()
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		t.Fatalf("this machine's kernel offers no Landlock (%v); the test needs it", errno)
	}
	return int(abi)
}

// tableColumn reads the object at path as `kubectl get` does (the API server's Table) and
// returns its column named name.
func tableColumn(t *testing.T, ctx context.Context, path, name string) string {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.Config.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("reading %s as a table: %s %v\n%s", path, resp.Status, err, body)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	for i, c := range table.ColumnDefinitions {
		if c.Name == name && len(table.Rows) == 1 && i < len(table.Rows[0].Cells) {
			s, _ := table.Rows[0].Cells[i].(string)
			return s
		}
	}
	t.Fatalf("%s has no column %s in one row: %+v", path, name, table.ColumnDefinitions)
	return ""
}
