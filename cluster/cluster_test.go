package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

var env *Cluster

// startTimeout bounds building (first run only) and starting a control plane.
const startTimeout = 45 * time.Minute

// helperEnv selects, in a child test binary, the helper that starts a control plane and exits.
const helperEnv = "EVALSI_CLUSTER_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(runWithControlPlane(m))
}

// runWithControlPlane runs the package's tests against one control plane (every test here needs
// it; package clustertest, which other packages use, imports this one and cannot be used here).
func runWithControlPlane(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	c, err := Start(ctx, Options{Nodes: 2, CRDDirs: []string{"../chart/evalsi-crds/files/crds"}, Progress: os.Stderr})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		return 1
	}
	defer c.Stop()
	env = c
	return m.Run()
}

// eventually calls check every 100ms until it returns nil, and fails the test when ctx ends first.
func eventually(t *testing.T, ctx context.Context, what string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func namespace(t *testing.T, ctx context.Context) string {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"generateName": "test-"},
	}}
	got, err := env.Dynamic().Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetName()
}

var deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// webDeployment is a Deployment "web" of replicas pods.
func webDeployment(replicas int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web"},
		"spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": "example/web:1"}}},
			},
		},
	}}
}

func TestDeploymentBecomesAvailableOnKwokNodes(t *testing.T) {
	ctx := testContext(t)
	ns := namespace(t, ctx)
	deployments := env.Dynamic().Resource(deploymentsGVR).Namespace(ns)
	if _, err := deployments.Create(ctx, webDeployment(2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "deployment 2/2 available", func() error {
		got, err := deployments.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		avail, _, _ := unstructured.NestedInt64(got.Object, "status", "availableReplicas")
		if avail != 2 || !conditionTrue(got, "Available") {
			return fmt.Errorf("available replicas %d, status %v", avail, got.Object["status"])
		}
		return nil
	})
}

func TestGarbageCollectorDeletesOwnedObjects(t *testing.T) {
	ctx := testContext(t)
	ns := namespace(t, ctx)
	cms := env.Dynamic().Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns)
	owner, err := cms.Create(ctx, configMap("owner", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": owner.GetName(), "uid": string(owner.GetUID()), "controller": true}
	if _, err := cms.Create(ctx, configMap("owned", []any{ref}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "owned ConfigMap deleted", func() error {
		_, err := cms.Get(ctx, "owned", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("owned ConfigMap still there (err %v)", err)
	})
}

func configMap(name string, owners []any) *unstructured.Unstructured {
	meta := map[string]any{"name": name}
	if owners != nil {
		meta["ownerReferences"] = owners
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}}
}

func TestClusterRoleAggregatesIntoEdit(t *testing.T) {
	ctx := testContext(t)
	roles := env.Dynamic().Resource(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"})
	role := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{
			"name":   "test-aggregate-to-edit",
			"labels": map[string]any{"rbac.authorization.k8s.io/aggregate-to-edit": "true"},
		},
		"rules": []any{map[string]any{"apiGroups": []any{"example.test"}, "resources": []any{"widgets"}, "verbs": []any{"get"}}},
	}}
	if _, err := roles.Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "edit aggregates widgets", func() error {
		edit, err := roles.Get(ctx, "edit", metav1.GetOptions{})
		if err != nil {
			return err
		}
		rules, _, _ := unstructured.NestedSlice(edit.Object, "rules")
		for _, r := range rules {
			groups, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "apiGroups")
			if slices.Contains(groups, "example.test") {
				return nil
			}
		}
		return fmt.Errorf("edit has %d rules, none for example.test", len(rules))
	})
}

func TestTokenRequestAuthenticatesServiceAccount(t *testing.T) {
	ctx := testContext(t)
	ns := namespace(t, ctx)
	cs := env.Clientset()
	sa, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
	robot := kubernetes.NewForConfigOrDie(cfg)
	review, err := robot.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + ns + ":robot"; review.Status.UserInfo.Username != want {
		t.Errorf("authenticated as %q, want %q", review.Status.UserInfo.Username, want)
	}
	_, err = robot.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("listing ConfigMaps without a Role: got %v, want Forbidden", err)
	}
}

// TestNoProcessLeftAfterExit runs a child test binary that starts a control plane and then either
// stops it or exits without stopping it; in both cases none of its processes may outlive it.
func TestNoProcessLeftAfterExit(t *testing.T) {
	for _, mode := range []string{"stop", "exit"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			dir := t.TempDir()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+mode, "EVALSI_HELPER_DIR="+dir)
			out, err := cmd.Output()
			if err != nil && mode == "stop" {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			pids := parsePIDs(t, out)
			if len(pids) < 5 {
				t.Fatalf("helper reported %d processes, want 5 (etcd, apiserver, controller-manager, scheduler, kwok): %s", len(pids), out)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				alive := alivePIDs(pids, dir)
				if len(alive) == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("processes still running after the test binary exited: %v", alive)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// runHelper starts a control plane in EVALSI_HELPER_DIR, prints its process ids, and then stops
// it (mode "stop") or exits at once without stopping it (mode "exit").
func runHelper(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := Start(ctx, Options{Dir: os.Getenv("EVALSI_HELPER_DIR"), Progress: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print("PIDS")
	for _, p := range c.PIDs() {
		fmt.Printf(" %d", p)
	}
	fmt.Println()
	if mode == "stop" {
		c.Stop()
		return 0
	}
	return 3
}

func parsePIDs(t *testing.T, out []byte) []int {
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "PIDS" {
			continue
		}
		var pids []int
		for _, s := range f[1:] {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatal(err)
			}
			pids = append(pids, n)
		}
		return pids
	}
	return nil
}

// alivePIDs returns the pids that still run a process whose command line names dir, the
// helper's cluster directory (so that a reused pid is not mistaken for a leftover).
func alivePIDs(pids []int, dir string) []int {
	var alive []int
	for _, p := range pids {
		if syscall.Kill(p, 0) != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline"))
		if err != nil || strings.Contains(string(cmdline), dir) {
			// A zombie or an unreadable process still counts until it is gone.
			if stat, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "stat")); strings.Contains(string(stat), ") Z ") {
				continue
			}
			alive = append(alive, p)
		}
	}
	return alive
}

func TestGPUNodes(t *testing.T) {
	ctx := testContext(t)
	before := env.nodeCount
	if err := env.AddNodes(ctx, 1, map[string]string{"nvidia.com/gpu": "4"}); err != nil {
		t.Fatal(err)
	}
	node, err := env.Clientset().CoreV1().Nodes().Get(ctx, fmt.Sprintf("kwok-node-%d", before), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gpus := node.Status.Allocatable["nvidia.com/gpu"]; gpus.String() != "4" {
		t.Errorf("allocatable nvidia.com/gpu = %s, want 4", gpus.String())
	}
	if len(node.Spec.Taints) != 0 {
		t.Errorf("node taints %v, want none", node.Spec.Taints)
	}
}

// Without the ReplicaSet controller (the benchmarks' -pods=false), a Deployment gets its
// ReplicaSet and no pod is asked for.
func TestWithoutReplicaSets(t *testing.T) {
	ctx := testContext(t)
	c, err := Start(ctx, Options{WithoutReplicaSets: true, WithoutKubectl: true, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if _, err := c.Dynamic().Resource(deploymentsGVR).Namespace("default").Create(ctx, webDeployment(1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicaSets := c.Dynamic().Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}).Namespace("default")
	eventually(t, ctx, "the Deployment's ReplicaSet", func() error {
		list, err := replicaSets.List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			err = fmt.Errorf("none yet")
		}
		return err
	})
	// The ReplicaSet controller would ask for the pod within milliseconds of the ReplicaSet.
	time.Sleep(3 * time.Second)
	pods, err := c.Clientset().CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods, want none", len(pods.Items))
	}
}

// TestKwokStartedAgainWhenItExits kills KWOK (SIGKILL, as its own crash ends it): the cluster
// starts it again, and a node added afterwards becomes Ready. KWOK v0.8.0 once crashed at a
// stage's first match in a fresh clone's run and took a package's control plane with it.
func TestKwokStartedAgainWhenItExits(t *testing.T) {
	ctx := testContext(t)
	c, err := Start(ctx, Options{WithoutKubectl: true, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	first := c.process("kwok")
	if err := syscall.Kill(first.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	if err := c.AddNodes(ctx, 1, nil); err != nil {
		t.Fatalf("adding a node after KWOK was killed: %v", err)
	}
	if c.process("kwok") == first {
		t.Error("the killed KWOK is still the cluster's")
	}
	if _, err := os.Stat(first.log + ".previous"); err != nil {
		t.Errorf("the killed KWOK's log was not kept: %v", err)
	}
}
