// Package realnode_test runs pods on a real node (cluster.RealNode): a kubelet, containerd and
// runc with the CNI bridge, in network, mount and PID namespaces the test binary makes for itself.
package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/isolation"
)

func TestMain(m *testing.M) { cluster.IsolatedMain(m) }

// TestIsolationProbeRunsInARealContainer runs the operator's isolation probe, as the first
// container of a Landlock sandbox pool's pod runs it, from an image of the operator binary on a
// real node: the kubelet starts it through containerd and runc as a restricted pod (uid 65532,
// no capabilities, no privilege escalation, the runtime's default seccomp profile), and the
// probe's report, which the kubelet takes from its termination message, shows each in force, as
// the runtime gives it and not as the test kubelet that ran it as a local process did. The
// metadata address is dialed from the pod's own network and goes nowhere: nothing routes out of
// the test's namespace.
func TestIsolationProbeRunsInARealContainer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	node, err := c.StartRealNode(ctx, "real-node")
	if err != nil {
		t.Fatal(err)
	}
	root, err := cluster.Checkout()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "evalsi-operator")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, ".")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, out)
	}
	const image = "evalsi.test/evalsi-operator:test"
	if err := node.Import(ctx, cluster.Image{Ref: image, Files: map[string]string{"/usr/local/bin/evalsi-operator": bin},
		Entrypoint: []string{"/usr/local/bin/evalsi-operator"}, User: "65532"}); err != nil {
		t.Fatal(err)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                     node.Name,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "probe", Image: image, ImagePullPolicy: corev1.PullNever,
				Args: []string{"probe", "--rung=landlock", "--temp-dir=/tmp", "--dial-timeout=2s"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	pods := c.Clientset().CoreV1().Pods("default")
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ended *corev1.ContainerStateTerminated
	clustertest.Eventually(t, ctx, "the probe's container terminated", func() error {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range p.Status.ContainerStatuses {
			if ended = s.State.Terminated; ended != nil {
				return nil
			}
		}
		return fmt.Errorf("phase %s", p.Status.Phase)
	})
	message := ended.Message
	if ended.ExitCode != 0 {
		t.Errorf("the probe exited %d (the floor not met): %s", ended.ExitCode, message)
	}
	var result isolation.Result
	if err := json.Unmarshal([]byte(message), &result); err != nil {
		t.Fatalf("the probe's termination message %q: %v", message, err)
	}
	r := result.Report
	for what, ok := range map[string]bool{
		"the runtime's seccomp filter":       r.Seccomp == "filter",
		"no_new_privs":                       r.NoNewPrivs,
		"no effective capability":            r.Capabilities == "0000000000000000",
		"a read-only root filesystem":        r.RootReadOnly,
		"Landlock restricting a path":        r.LandlockRestricts,
		"the metadata address not answering": !r.Reach[isolation.MetadataTarget].Reachable,
		"the floor met":                      len(result.Missing) == 0,
	} {
		if !ok {
			t.Errorf("the probe in a real container does not show %s: %s", what, message)
		}
	}
}
