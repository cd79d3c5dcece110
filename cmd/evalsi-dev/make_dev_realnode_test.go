package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/internal/maketest"
)

// TestMakeDevOnARealNode types README's `make dev DEV_ARGS=--real-node`: the examples' pods run
// in containers, from the images of make images pushed to the node's registry, on a real node in
// namespaces the session makes for itself. From this test's own shell, outside them, through the
// kubeconfig the session printed: the judge pool's pod runs in a container on the real node,
// signed in to the session's evalsid with its projected token, and its NetworkPolicy drops its
// packets to the metadata address; the CheckpointServer, which asks for a GPU this machine lacks,
// runs on the KWOK node. After Ctrl-C nothing of the session is left: no process, no directory,
// no cgroup. The bubblewrap class's user namespaces do not start on this node (issue 67's
// closing note): it is the one example not Ready.
func TestMakeDevOnARealNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("make dev DEV_ARGS=--real-node needs root: run the tests as root (make test does, as CI does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	run, ready := makeDevExcept(t, []string{"SandboxClass bubblewrap"}, "DEV_ARGS=--real-node")
	run.Until(ctx, "every example Ready but the bubblewrap class", ready)
	kubeconfig := run.Kubeconfig()
	if kubeconfig == "" {
		t.Fatalf("make dev printed no KUBECONFIG:\n%s", run.Text())
	}
	session := regexp.MustCompile(`/evalsi-isolated-[0-9]+`).FindString(run.Text())
	if session == "" {
		t.Fatalf("make dev named no directory inside its namespaces:\n%s", run.Text())
	}

	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	onNode := func(selector, node string) func() error {
		return func() error {
			pods, err := cs.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning {
					return nil
				}
			}
			return fmt.Errorf("no pod of %s running on %s", selector, node)
		}
	}
	judge := "app.kubernetes.io/name=evaluator,app.kubernetes.io/instance=judge"
	clustertest.Eventually(t, ctx, "the judge pool's pod running on the real node", onNode(judge, "real-node"))
	clustertest.Eventually(t, ctx, "the CheckpointServer's pod on the KWOK node", onNode("app.kubernetes.io/instance=adapter-step-900", "kwok-node-0"))
	pods, err := cs.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{LabelSelector: judge})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the judge pool's pods: %v", err)
	}
	pod := pods.Items[0]
	if id := pod.Status.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "containerd://") {
		t.Errorf("the judge pool's container %q was not started by containerd", id)
	}
	if image := pod.Spec.Containers[0].Image; !strings.Contains(image, "/evalsi/evalsi-pool-standin@sha256:") {
		t.Errorf("the judge pool's image %s is not the pool image pushed by digest", image)
	}
	// The stand-in reports once what its pod was given (testdata/pool-standin), within its probe's
	// settling time (60 s) of starting.
	reported, cancelReport := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelReport()
	clustertest.Eventually(t, reported, "the judge pool's report", func() error {
		log, err := cs.CoreV1().Pods("team-a").GetLogs(pod.Name, &corev1.PodLogOptions{Container: pod.Spec.Containers[0].Name}).DoRaw(reported)
		if err != nil {
			return err
		}
		for _, want := range []string{"sign-in: evalsid: signed in", "metadata unreachable"} {
			if !strings.Contains(string(log), want) {
				return fmt.Errorf("its log lacks %q:\n%s", want, log)
			}
		}
		return nil
	})

	run.Interrupt()
	if strings.Contains(run.Text(), "evalsi-dev: ") {
		t.Errorf("the dev program ended with an error:\n%s", run.Text())
	}
	maketest.LeftBehind(t, filepath.Dir(kubeconfig))
	maketest.LeftBehind(t, filepath.Join(os.TempDir(), session))
	id := strings.TrimPrefix(session, "/evalsi-isolated-")
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/evalsi-node-" + id); len(left) > 0 {
		t.Errorf("the session's cgroups are left: %v", left)
	}
}
