package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/evalsi"
	"evals.si/operator/guest"
)

// trialRunsInItsShape makes pod rung trials as the pod class's launcher does, as its account:
// from the trial shape the sandbox operator rendered (PodTemplate sandbox-pod-trial), with one of
// the class's trialImages (the pool image the guide pushed, which the test adds to the class) and
// the trial's command in plain environment. The API server admits it under evalsi-trial-pods; on
// the node, the isolation probe runs first, the platform image's init container copies
// evalsi-guest in, and the trial's image runs the guest, which runs the command to its end and
// reports its exit code in the termination message. A trial pod off its shape (a label more, the
// host's network) is refused by the policy, naming why.
func trialRunsInItsShape(t *testing.T, ctx context.Context, c *cluster.Cluster, images map[string]string) {
	t.Helper()
	const ns, class = "evalsi-sandbox", "pod"
	image := images["POOL_IMAGE_REPOSITORY"] + "@" + images["POOL_IMAGE_DIGEST"]
	patch := fmt.Sprintf(`{"spec":{"trialImages":[%q]}}`, image)
	if _, err := c.Dynamic().Resource(evalsi.SandboxClasses).Patch(ctx, class, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":sandbox-" + class,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	launcher := kubernetes.NewForConfigOrDie(cfg)
	var shape *corev1.PodTemplate
	clustertest.Eventually(t, ctx, "the trial shape with the pool image", func() error {
		var err error
		shape, err = launcher.CoreV1().PodTemplates(ns).Get(ctx, "sandbox-"+class+"-trial", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !strings.Contains(shape.Annotations["evals.si/trial-images"], image) {
			return fmt.Errorf("trial images %q", shape.Annotations["evals.si/trial-images"])
		}
		return nil
	})
	trial := func(change func(*corev1.Pod)) (*corev1.Pod, error) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "trial-", Labels: shape.Template.Labels, Annotations: shape.Template.Annotations},
			Spec: *shape.Template.Spec.DeepCopy()}
		p.Spec.Containers[0].Image = image
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: guest.ArgvEnv, Value: `["sh","-c","echo a trial ran in its sandbox as $(id -u)"]`}}
		if change != nil {
			change(p)
		}
		return launcher.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	}
	for what, tc := range map[string]struct {
		change func(*corev1.Pod)
		says   string
	}{
		"a label more": {func(p *corev1.Pod) {
			p.Labels = map[string]string{"escape": "true"}
			for k, v := range shape.Template.Labels {
				p.Labels[k] = v
			}
		}, "carries its class's trial labels and no other"},
		"the host's network": {func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "no field added or changed"},
	} {
		if _, err := trial(tc.change); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("a trial pod with %s: %v, want refused saying %q", what, err, tc.says)
		}
	}
	p, err := trial(nil)
	if err != nil {
		t.Fatalf("the launcher's trial pod in its shape: %v", err)
	}
	clustertest.Eventually(t, ctx, "the trial pod run to its end", func() error {
		got, err := c.Clientset().CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s; %s", got.Status.Phase, podEvents(ctx, c, got))
		}
		p = got
		return nil
	})
	var r guest.Result
	if s := p.Status.ContainerStatuses; len(s) != 1 || s[0].State.Terminated == nil || json.Unmarshal([]byte(s[0].State.Terminated.Message), &r) != nil || r.ExitCode != 0 {
		t.Errorf("the trial's result: %+v", p.Status.ContainerStatuses)
	}
	if logs := podLog(t, ctx, c, ns, p.Name, "trial"); !strings.Contains(logs, "a trial ran in its sandbox as ") {
		t.Errorf("the trial's log:\n%s", logs)
	}
}
