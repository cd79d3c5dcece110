package realnode_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/cmd/evalsi-release/release"
	"evals.si/operator/evalsi"
	"evals.si/operator/internal/checkout"
)

// TestCheckpointServerServesOnTheRealNode runs a CheckpointServer on the stand-in vLLM image
// (testdata/model-standin, pushed by `make push` and pulled by digest), with the operator's
// checkpointserver controller: the pod is scheduled on the GPU the node advertises as an
// extended resource, mounts the checkpoint claim's PersistentVolume read-only at /checkpoints
// and a memory-backed /dev/shm, receives its key through VLLM_API_KEY, and passes the rendered
// startup and readiness probes as the kubelet runs them. The server answers /v1/models with its
// served model only with the key. A spec change is not Ready on the old pod: Ready is False for
// the new generation until the replacement passes /health.
func TestCheckpointServerServesOnTheRealNode(t *testing.T) {
	c, node := realNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs := c.Clientset()
	const ns, name, served, key = "serving", "step-900", "run1-step900", "test-key-not-a-secret"
	images := pushImages(t, ctx, node)

	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.InstallCRDs(ctx, filepath.Join(root, "chart", "evalsi-crds", "files", "crds")); err != nil {
		t.Fatal(err)
	}
	// One GPU, advertised as Kubernetes documents for an extended resource without a device plugin.
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType,
		[]byte(`[{"op":"add","path":"/status/capacity/nvidia.com~1gpu","value":"1"}]`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, ctx, "the node's GPU allocatable", func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q := n.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 1 {
			return fmt.Errorf("allocatable nvidia.com/gpu %s", q.String())
		}
		return nil
	})

	// The checkpoint: a directory of the test's, as a PersistentVolume bound to the claim.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "step-900"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	readOnlyMany := []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}
	empty := ""
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "training-checkpoints"}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}, AccessModes: readOnlyMany,
		PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: "training-checkpoints"}, StorageClassName: empty}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{}) })
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "training-checkpoints", Namespace: ns}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: readOnlyMany, VolumeName: pv.Name, StorageClassName: &empty,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vllm-key", Namespace: ns}, StringData: map[string]string{"api-key": key}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	runOperator(t, c, "--namespace="+ns, "--controllers=checkpointserver", "--vllm-image="+images.ModelImage())
	servers := c.Dynamic().Resource(evalsi.CheckpointServers).Namespace(ns)
	server := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "CheckpointServer",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"model": "/checkpoints/step-900", "servedModelName": served, "checkpointClaim": "training-checkpoints",
			"apiKeySecret": map[string]any{"name": "vllm-key"}, "gpus": int64(1), "extraArgs": []any{"--standin-health-delay=3s"},
			// What the stand-in needs: a vLLM server's default requests do not fit this node.
			"resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}}}}}
	if _, err := servers.Create(ctx, server, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := func(generation int64) func() error {
		return func() error {
			s, err := servers.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got, want := readyCondition(s), fmt.Sprintf("True at generation %d", generation); got != want {
				return fmt.Errorf("Ready %s, want %s; %s", got, want, notReady(ctx, c))
			}
			return nil
		}
	}
	clustertest.Eventually(t, ctx, "the CheckpointServer Ready", ready(1))

	pod := serverPod(t, ctx, c, ns, name)
	if q := pod.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; pod.Spec.NodeName != node.Name || q.Value() != 1 {
		t.Errorf("the server's pod on %q with nvidia.com/gpu %s, want the real node's one GPU", pod.Spec.NodeName, q.String())
	}
	logs := podLog(t, ctx, c, ns, pod.Name, "vllm")
	for _, want := range []string{"key present", "/dev/shm tmpfs", "/checkpoints mounted read-only (ro", "holding [step-900]"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the stand-in's report lacks %q:\n%s", want, logs)
		}
	}

	// Through the server's Service, from the node (the policy admits the node, as the kubelet's
	// probes need): its model only with its key.
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name+"-vllm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	models := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "8000") + "/v1/models"
	if code, _ := get(t, ctx, models, ""); code != http.StatusUnauthorized {
		t.Errorf("/v1/models without the key: %d, want 401", code)
	}
	code, body := get(t, ctx, models, key)
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil || len(list.Data) != 1 || list.Data[0].ID != served {
		t.Errorf("/v1/models with the key: %d %s, want 200 and %s", code, body, served)
	}

	// A spec change: the old pod goes (Recreate, it holds the GPU), and the server is not Ready
	// for the new generation until the new pod passes /health, 20 s after it starts.
	patch := []byte(`{"spec":{"extraArgs":["--standin-health-delay=20s"]}}`)
	if _, err := servers.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var first string
	clustertest.Eventually(t, ctx, "the CheckpointServer's status at generation 2", func() error {
		s, err := servers.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := readyCondition(s); strings.HasSuffix(got, "at generation 2") {
			first = got
			return nil
		}
		return fmt.Errorf("not yet observed")
	})
	if first != "False at generation 2" {
		t.Errorf("the first Ready of generation 2: %s, want False until the new pod passes /health", first)
	}
	clustertest.Eventually(t, ctx, "the CheckpointServer Ready again", ready(2))
	if pod := serverPod(t, ctx, c, ns, name); !strings.Contains(strings.Join(pod.Spec.Containers[0].Args, " "), "--standin-health-delay=20s") {
		t.Errorf("Ready on a pod with args %v, not the new revision's", pod.Spec.Containers[0].Args)
	}

	// The checkpoint watcher's flow, as the watcher's documented identity: its Role as the guide
	// gives it ("Running the checkpoint watcher", run as written), then with kubectl as its
	// service account, a server of its checkpoint claim and key Secret applied, waited on until
	// its pod passes /health, evaluated at its endpoint, deleted, and nothing of it left.
	if err := servers.Delete(ctx, name, metav1.DeleteOptions{}); err != nil { // the node's one GPU
		t.Fatal(err)
	}
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vllm-keys", Namespace: ns}, StringData: map[string]string{"step-1000": key}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, keys, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.RunGuideSection(t, ctx, c, filepath.Join(root, "docs", "install.md"), "Running the checkpoint watcher", "NAMESPACE="+ns)
	asWatcher := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, c.Kubectl, append([]string{"--kubeconfig=" + c.Kubeconfig, "-n", ns,
			"--as=system:serviceaccount:" + ns + ":checkpoint-watcher", "--as-group=system:serviceaccounts"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s as the watcher: %v\n%s\n%s", strings.Join(args, " "), err, out, notReady(ctx, c))
		}
		return string(out)
	}
	asWatcher(`apiVersion: evals.si/v1alpha1
kind: CheckpointServer
metadata:
  name: step-1000
  labels: {app.kubernetes.io/managed-by: evalsi}
spec:
  model: /checkpoints/step-900
  servedModelName: run1-step1000
  checkpointClaim: training-checkpoints
  apiKeySecret: {name: vllm-keys, key: step-1000}
  extraArgs: [--standin-health-delay=3s]
  resources: {requests: {cpu: 50m, memory: 64Mi}}
`, "apply", "-f", "-")
	asWatcher("", "wait", "--for=condition=Ready", "checkpointserver/step-1000", "--timeout=3m")
	endpoint := asWatcher("", "get", "checkpointserver", "step-1000", "-o", "jsonpath={.status.endpoint}")
	if want := "http://step-1000-vllm." + ns + ".svc:8000/v1"; endpoint != want {
		t.Errorf("the watcher reads endpoint %q, want %q", endpoint, want)
	}
	// The endpoint's Service, from the node: its model, with its key.
	svc, err = cs.CoreV1().Services(ns).Get(ctx, "step-1000-vllm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	code, body = get(t, ctx, "http://"+net.JoinHostPort(svc.Spec.ClusterIP, "8000")+"/v1/models", key)
	if code != http.StatusOK || !strings.Contains(body, "run1-step1000") {
		t.Errorf("the watcher's server's /v1/models: %d %s, want 200 and run1-step1000", code, body)
	}
	asWatcher("", "delete", "checkpointserver", "step-1000", "--wait=true", "--timeout=2m")
	clustertest.Eventually(t, ctx, "nothing of the watcher's server left", func() error {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=step-1000"})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		for _, gvr := range []schema.GroupVersionResource{evalsi.Deployments, evalsi.Services} {
			if _, err := c.Dynamic().Resource(gvr).Namespace(ns).Get(ctx, "step-1000-vllm", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s step-1000-vllm: %v", gvr.Resource, err)
			}
		}
		return nil
	})
}

// pushImages builds the images once for the tests that need them (the guide pushes for itself, as
// written) the way a user without a reachable registry does: `make images` writes them as image
// archives, and crane copies each into the node's registry, from which the kubelet pulls it by
// digest. It returns their repositories and digests as bin/images/images.env names them.
func pushImages(t *testing.T, ctx context.Context, node *cluster.RealNode) release.Pushed {
	t.Helper()
	root, err := checkout.Root()
	if err != nil {
		t.Fatal(err)
	}
	world.push.Do(func() {
		if world.pushErr = release.MakeImages(ctx, root, io.Discard); world.pushErr == nil {
			world.images, world.pushErr = release.PushArchives(ctx, root, node.Registry+"/evalsi")
		}
	})
	if world.pushErr != nil {
		t.Fatal(world.pushErr)
	}
	return world.images
}

// imagesEnv reads the bin/images/images.env that `make push` wrote in the checkout root.
func imagesEnv(t *testing.T, root string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "bin", "images", "images.env"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env
}

// runOperator runs the operator binary as a process beside the node, with the admin's
// kubeconfig and args, until the test ends.
func runOperator(t *testing.T, c *cluster.Cluster, args ...string) {
	t.Helper()
	cmd := exec.Command(world.bin, append([]string{"run", "--kubeconfig=" + c.Kubeconfig, "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...)...)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("the operator:\n%s", log.String())
		}
	})
}

// readyCondition says a Ready condition's status and the generation it was observed at.
func readyCondition(obj *unstructured.Unstructured) string {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			return fmt.Sprintf("%v at generation %v", m["status"], m["observedGeneration"])
		}
	}
	return "absent"
}

// serverPod returns the one pod of a CheckpointServer.
func serverPod(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	pods, err := c.Clientset().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=checkpointserver,app.kubernetes.io/instance=" + name})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d pods of CheckpointServer %s, want 1", len(pods.Items), name)
	}
	return &pods.Items[0]
}

// podLog is a container's log, through the API server and the kubelet.
func podLog(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, pod, container string) string {
	t.Helper()
	out, err := c.Clientset().CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).Do(ctx).Raw()
	if err != nil {
		t.Fatalf("the logs of %s/%s: %v", ns, pod, err)
	}
	return string(out)
}

// get GETs url with key as a bearer token ("" for none) and returns the status and body.
func get(t *testing.T, ctx context.Context, url, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
