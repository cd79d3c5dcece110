// Package realnode_test runs pods on a real node (cluster.RealNode): a kubelet, containerd and
// runc with the CNI bridge, in network, mount and PID namespaces the test binary makes for itself.
package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"evals.si/operator/cluster"
	"evals.si/operator/cluster/clustertest"
	"evals.si/operator/cmd/evalsi-release/release"
	"evals.si/operator/internal/checkout"
	"evals.si/operator/isolation"
)

func TestMain(m *testing.M) { cluster.IsolatedMain(m) }

// operatorImage is the image of the operator binary the tests' pods run.
const operatorImage = "evalsi.test/evalsi-operator:test"

// world is the control plane with its real node, started by the first test that needs it; it
// ends with the test binary's namespaces.
var world struct {
	once sync.Once
	c    *cluster.Cluster
	node *cluster.RealNode
	bin  string // the operator binary operatorImage holds
	err  error
	// push makes the images of `make images` once and pushes them, for the tests that run them
	// (pushImages).
	push    sync.Once
	pushErr error
	// images are the repositories and digests pushImages pushed.
	images release.Pushed
}

// realNode returns the control plane and its real node, with operatorImage imported.
func realNode(t *testing.T) (*cluster.Cluster, *cluster.RealNode) {
	t.Helper()
	world.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if world.c, world.err = cluster.Start(ctx, cluster.Options{Progress: os.Stderr, RealNode: true}); world.err != nil {
			return
		}
		world.node = world.c.Node
		root, err := checkout.Root()
		if err != nil {
			world.err = err
			return
		}
		bin := filepath.Join(world.c.Dir, "evalsi-operator")
		world.bin = bin
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, ".")
		build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			world.err = fmt.Errorf("building the operator: %v\n%s", err, out)
			return
		}
		world.err = world.node.Import(ctx, cluster.Image{Ref: operatorImage, Files: map[string]string{"/usr/local/bin/evalsi-operator": bin},
			Entrypoint: []string{"/usr/local/bin/evalsi-operator"}, User: "65532"})
	})
	if world.err != nil {
		t.Fatal(world.err)
	}
	return world.c, world.node
}

// restrictedPod is a pod of operatorImage on the real node with args, as Pod Security
// `restricted` asks: uid 65532, the runtime's default seccomp profile, no capabilities, no
// privilege escalation, a read-only root with an emptyDir at /tmp.
func restrictedPod(node *cluster.RealNode, name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                     node.Name,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "main", Image: operatorImage, ImagePullPolicy: corev1.PullNever, Args: args,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// probeResult runs pod, an isolation probe, to its end and returns its exit code and the result
// the kubelet took from its termination message.
func probeResult(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) (int32, isolation.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := c.Clientset().CoreV1().Pods(pod.Namespace)
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
		return fmt.Errorf("phase %s; %s", p.Status.Phase, podEvents(ctx, c, p))
	})
	var result isolation.Result
	if err := json.Unmarshal([]byte(ended.Message), &result); err != nil {
		t.Fatalf("the probe's termination message %q: %v", ended.Message, err)
	}
	return ended.ExitCode, result, ended.Message
}

// TestIsolationProbeRunsInARealContainer runs the operator's isolation probe, as the first
// container of a Landlock sandbox pool's pod runs it, from an image of the operator binary on a
// real node: the kubelet starts it through containerd and runc as a restricted pod, and the
// probe's report, which the kubelet takes from its termination message, shows each part of that
// in force as the runtime gives it (not as the test kubelet that ran it as a local process did).
// The metadata address is the harness's listener inside the test's network namespace, and it
// answers: the pod runs, as a pool's does, under a NetworkPolicy that denies its egress, which
// kube-router enforces while the probe waits for it (--settle).
func TestIsolationProbeRunsInARealContainer(t *testing.T) {
	c, node := realNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	denyEgress := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-egress", Namespace: "default"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}},
	}
	if _, err := c.Clientset().NetworkingV1().NetworkPolicies("default").Create(ctx, denyEgress, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, result, message := probeResult(t, c, restrictedPod(node, "probe", "probe", "--rung=landlock", "--temp-dir=/tmp", "--dial-timeout=2s"))
	if code != 0 {
		t.Errorf("the probe exited %d (the floor not met): %s", code, message)
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
	// Every cloud's metadata address was dialed, and none answered.
	for _, tg := range isolation.MetadataTargets() {
		if got, probed := r.Reach[tg.Name]; !probed || got.Reachable {
			t.Errorf("metadata address %s (%s): probed %v, %+v; want it dialed and silent", tg.Address, tg.Name, probed, got)
		}
	}
}

// TestKubeletRunsReadinessProbes serves the reference evalsid from the operator's image, with
// the readiness probe its charts give it (HTTP /healthz): the kubelet reaches the pod over the
// CNI bridge, and the pod becomes Ready only once the probe passes.
func TestKubeletRunsReadinessProbes(t *testing.T) {
	c, node := realNode(t)
	serveEvalsid(t, c, node, "default")
}

// podEvents says what the kubelet reported of p: its Events, and its containers' last ends.
func podEvents(ctx context.Context, c *cluster.Cluster, p *corev1.Pod) string {
	var parts []string
	if events, err := c.Clientset().CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name}); err == nil {
		for _, e := range events.Items {
			parts = append(parts, e.Reason+": "+e.Message)
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if t := s.LastTerminationState.Terminated; t != nil {
			parts = append(parts, fmt.Sprintf("%s ended %d: %s", s.Name, t.ExitCode, t.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// TestPodsReachServicesByNameAndPoliciesDropTheRest runs the isolation probe in a pod of one
// namespace, dialing evalsid by its Service's short name, another namespace's evalsid by its
// full name, the Kubernetes API by the kubernetes Service, and the real node's metadata listener
// (cluster.MetadataAddress, inside the test's network namespace). Without a NetworkPolicy each answers:
// cluster DNS resolves the names, kube-proxy routes the ClusterIPs, and the listener is real.
// Under a policy that lets the pod reach its own namespace's evalsid and DNS only, kube-router
// drops the rest.
func TestPodsReachServicesByNameAndPoliciesDropTheRest(t *testing.T) {
	c, node := realNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, ns := range []string{"tenant-a", "tenant-b"} {
		serveEvalsid(t, c, node, ns)
	}
	reach := []string{"--reach=metadata=169.254.169.254:80", "--reach=own=evalsid:8090",
		"--reach=other=evalsid.tenant-b.svc.cluster.local:8090"}
	probe := func(name string, args ...string) isolation.Report {
		pod := restrictedPod(node, name, append(append([]string{"probe", "--rung=landlock", "--temp-dir=/tmp", "--dial-timeout=3s"}, reach...), args...)...)
		pod.Namespace = "tenant-a"
		pod.Spec.AutomountServiceAccountToken = nil
		_, result, _ := probeResult(t, c, pod)
		return result.Report
	}
	open := probe("without-policy", "--settle=0s")
	for _, target := range []string{"metadata", "own", "other", "kubernetes"} {
		if !open.Reach[target].Reachable {
			t.Errorf("without a NetworkPolicy, %s does not answer: %s", target, open.Reach[target].How)
		}
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "only-evalsid", Namespace: "tenant-a"},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "evalsid"}}}}},
				{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}}},
			},
		},
	}
	if _, err := c.Clientset().NetworkingV1().NetworkPolicies("tenant-a").Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-router programs a pod's rules after its containers start: the probe dials the
	// targets that must not answer again while they do (--settle).
	closed := probe("with-policy", "--unreachable=metadata,other,kubernetes")
	if !closed.Reach["own"].Reachable {
		t.Errorf("under the policy, the namespace's own evalsid does not answer: %s", closed.Reach["own"].How)
	}
	for _, target := range []string{"metadata", "other", "kubernetes"} {
		if closed.Reach[target].Reachable {
			t.Errorf("under the policy, %s answers: %s", target, closed.Reach[target].How)
		}
	}
}

// serveEvalsid runs the reference evalsid from the operator's image in namespace ns, behind a
// Service named evalsid, and waits until its pod is Ready.
func serveEvalsid(t *testing.T, c *cluster.Cluster, node *cluster.RealNode, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := c.Clientset()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tokens := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "evalsid-tokens", Namespace: ns},
		Data: map[string]string{"tokens": "test-token system:serviceaccount:" + ns + ":test\n"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, tokens, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := restrictedPod(node, "evalsid", "evalsid", "--listen=0.0.0.0:8090", "--tokens=/etc/evalsid/tokens")
	pod.Namespace, pod.Labels = ns, map[string]string{"app": "evalsid"}
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "tokens",
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: tokens.Name}}}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "tokens", MountPath: "/etc/evalsid", ReadOnly: true})
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8090)}}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "evalsid", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: pod.Labels, Ports: []corev1.ServicePort{{Port: 8090, TargetPort: intstr.FromInt32(8090)}}}}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx, c, ns, pod.Name)
	// kube-proxy routes the Service within its sync: from the node, as from a pod.
	clustertest.Eventually(t, ctx, "the Service "+ns+"/evalsid answering", func() error {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(svc.Spec.ClusterIP, "8090"), time.Second)
		if err == nil {
			conn.Close()
		}
		return err
	})
}

// waitReady waits until the pod is Ready, saying what the kubelet reported while it is not.
func waitReady(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, name string) {
	t.Helper()
	pods := c.Clientset().CoreV1().Pods(ns)
	clustertest.Eventually(t, ctx, "pod "+ns+"/"+name+" Ready", func() error {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("phase %s; %s", p.Status.Phase, podEvents(ctx, c, p))
	})
}
