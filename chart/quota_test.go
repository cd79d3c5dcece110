package chart_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"evals.si/operator/internal/manifest"
)

// TestGPUsBoundedByTheChartsQuota renders the evalsi chart against the real API server (so that
// its lookup sees the namespace) and applies its ResourceQuota: a pod of the namespace, such as a
// CheckpointServer's, asking for more GPUs than gpuQuota is refused, whatever number of servers
// and replicas were declared. Where another quota of the namespace already bounds GPUs (a tenant
// provisioner's), the chart makes none. The test control plane runs no quota controller: the
// test writes the quota's status as that controller does.
func TestGPUsBoundedByTheChartsQuota(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := env.Clientset()
	quotas := func(ns string, extra ...string) []*corev1.ResourceQuota {
		t.Helper()
		out := helm(t, append([]string{"template", "evalsi", "evalsi", "-n", ns, "--dry-run=server", "--kube-version", "1.37.0", "--kubeconfig=" + env.Kubeconfig,
			"--set", "api.url=https://evalsid.evalsi-platform.svc"}, extra...)...)
		docs, err := manifest.Decode("helm template", strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		var found []*corev1.ResourceQuota
		for _, d := range docs {
			if d.Object.GetKind() != "ResourceQuota" {
				continue
			}
			var q corev1.ResourceQuota
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object.Object, &q); err != nil {
				t.Fatal(err)
			}
			found = append(found, &q)
		}
		return found
	}
	pod := func(gpus int64) *corev1.Pod {
		n := resource.NewQuantity(gpus, resource.DecimalSI)
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "vllm-"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.11.0",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": *n}, Limits: corev1.ResourceList{"nvidia.com/gpu": *n}}}}},
		}
	}

	const ns = "gpu-team"
	activeNamespace(t, ctx, ns, nil)
	got := quotas(ns, "--set", "gpuQuota=2")
	if len(got) != 1 || got[0].Name != "evalsi-gpus" || !got[0].Spec.Hard["requests.nvidia.com/gpu"].Equal(resource.MustParse("2")) {
		t.Fatalf("the chart's quotas: %+v, want evalsi-gpus of 2 GPUs", got)
	}
	q, err := cs.CoreV1().ResourceQuotas(ns).Create(ctx, got[0], metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("0")}}
	if _, err := cs.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(3), dryRun); err == nil || !strings.Contains(err.Error(), "exceeded quota") {
		t.Errorf("a pod asking for 3 GPUs under a quota of 2: %v, want it refused for the quota", err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(2), dryRun); err != nil {
		t.Errorf("a pod asking for 2 GPUs under a quota of 2: %v", err)
	}

	// A tenant provisioner's quota bounds GPUs already: the chart makes none of its own.
	const tenant = "gpu-tenant"
	activeNamespace(t, ctx, tenant, nil)
	if _, err := cs.CoreV1().ResourceQuotas(tenant).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "evalsi-tenant"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("4")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := quotas(tenant); len(got) != 0 {
		t.Errorf("the chart's quotas in a namespace whose quota bounds GPUs: %+v, want none", got)
	}
}
