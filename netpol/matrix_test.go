// Package netpol proves the NetworkPolicies the operator renders with a NetworkPolicy engine:
// cyclonus's matcher (the engine sigs.k8s.io/network-policy-api's policy assistant grew from)
// decides, for a matrix of pods, namespaces, addresses and ports, which connections the policies
// allow, and each is asserted. It is a module of its own so that the engine's dependencies stay
// out of the operator's.
package netpol

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"evals.si/operator/render"
)

// endpoint is one side of a connection: a pod (namespace, its labels, an address) or an address
// outside the cluster.
type endpoint struct {
	namespace string
	labels    map[string]string
	ip        string
}

func (e endpoint) peer() *matcher.TrafficPeer {
	if e.namespace == "" {
		return &matcher.TrafficPeer{IP: e.ip}
	}
	return &matcher.TrafficPeer{IP: e.ip, Internal: &matcher.InternalPeer{
		Namespace: e.namespace, PodLabels: e.labels,
		NamespaceLabels: map[string]string{"kubernetes.io/metadata.name": e.namespace},
	}}
}

// rendered renders obj and returns its NetworkPolicies and the labels of its pods.
func rendered(t *testing.T, opts render.Options, yaml map[string]any) ([]*networkingv1.NetworkPolicy, map[string]string) {
	t.Helper()
	policies, pods := renderedPods(t, opts, yaml)
	if len(policies) == 0 || pods["Deployment"] == nil {
		t.Fatalf("%s rendered no NetworkPolicy or no pods", yaml["kind"])
	}
	return policies, pods["Deployment"]
}

// renderedPods renders obj and returns its NetworkPolicies and the labels of the pods of each of
// its pod-making children by kind: a Deployment's, and a pod rung's trial shape (PodTemplate).
func renderedPods(t *testing.T, opts render.Options, yaml map[string]any) ([]*networkingv1.NetworkPolicy, map[string]map[string]string) {
	t.Helper()
	res, err := render.Object(&unstructured.Unstructured{Object: yaml}, opts)
	if err != nil {
		t.Fatal(err)
	}
	var policies []*networkingv1.NetworkPolicy
	pods := map[string]map[string]string{}
	for _, o := range res.Objects {
		switch o.GetKind() {
		case "NetworkPolicy":
			var np networkingv1.NetworkPolicy
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &np); err != nil {
				t.Fatal(err)
			}
			policies = append(policies, &np)
		case "Deployment":
			pods["Deployment"], _, _ = unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		case "PodTemplate":
			pods["PodTemplate"], _, _ = unstructured.NestedStringMap(o.Object, "template", "metadata", "labels")
		}
	}
	return policies, pods
}

func object(kind, namespace, name string, spec map[string]any) map[string]any {
	meta := map[string]any{"name": name, "uid": "00000000-0000-4000-8000-" + fmt.Sprintf("%012d", len(name))}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	return map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}
}

// TestNetworkPolicyMatrix renders an Evaluator's pool, a CheckpointServer and a SandboxClass's
// pool as the operator would with evalsid at a Service URL, and asks the engine about every
// connection of the matrix below: each allowed connection is one the pod's purpose needs, and
// everything else is denied.
func TestNetworkPolicyMatrix(t *testing.T) {
	opts := render.Options{DefaultImage: "evalsi/platform:1.4.0", VLLMImage: render.DefaultVLLMImage, SandboxNamespace: "evalsi-sandbox",
		APIURL: "https://evalsid.evalsi-platform.svc:8443"}
	var policies []*networkingv1.NetworkPolicy
	add := func(ps []*networkingv1.NetworkPolicy, labels map[string]string) map[string]string {
		policies = append(policies, ps...)
		return labels
	}
	judgeLabels := add(rendered(t, opts, object("Evaluator", "team-a", "judge", map[string]any{})))
	otherJudgeLabels := add(rendered(t, opts, object("Evaluator", "team-b", "judge", map[string]any{})))
	qwenLabels := add(rendered(t, opts, object("CheckpointServer", "team-a", "qwen", map[string]any{"model": "Qwen/Qwen2.5-0.5B-Instruct"})))
	stepLabels := add(rendered(t, opts, object("CheckpointServer", "team-a", "step", map[string]any{
		"model": "/checkpoints/run-1/step-1", "checkpointClaim": "ckpt"})))
	mirroredLabels := add(rendered(t, opts, object("CheckpointServer", "team-a", "mirrored", map[string]any{
		"model": "Qwen/Qwen2.5-0.5B-Instruct",
		"egress": []any{map[string]any{"to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "203.0.113.0/24"}}},
			"ports": []any{map[string]any{"protocol": "TCP", "port": int64(443)}}}}})))
	sandboxLabels := add(rendered(t, opts, object("SandboxClass", "", "landlock", map[string]any{"rung": "landlock"})))
	engine := matcher.BuildNetworkPolicies(false, policies)

	pods := map[string]endpoint{
		"judge":               {"team-a", judgeLabels, "10.244.1.10"},
		"team-b judge":        {"team-b", otherJudgeLabels, "10.244.2.10"},
		"qwen":                {"team-a", qwenLabels, "10.244.1.20"},
		"step":                {"team-a", stepLabels, "10.244.1.21"},
		"mirrored":            {"team-a", mirroredLabels, "10.244.1.22"},
		"the mirror":          {ip: "203.0.113.7"},
		"sandbox":             {"evalsi-sandbox", sandboxLabels, "10.244.3.10"},
		"client of qwen":      {"team-a", map[string]string{"evals.si/checkpoint-client": "qwen"}, "10.244.1.30"},
		"team-a's pod":        {"team-a", map[string]string{"app": "notebook"}, "10.244.1.31"},
		"evalsid":             {"evalsi-platform", map[string]string{"app.kubernetes.io/name": "evalsid"}, "10.244.4.10"},
		"evalsid's neighbour": {"evalsi-platform", map[string]string{"app.kubernetes.io/name": "billing"}, "10.244.4.11"},
		"kube-dns":            {"kube-system", map[string]string{"k8s-app": "kube-dns"}, "10.244.0.10"},
		"kube-system's":       {"kube-system", map[string]string{"component": "etcd"}, "10.244.0.11"},
		"metadata":            {ip: "169.254.169.254"},
		"azure wire":          {ip: "168.63.129.16"},
		"alibaba meta":        {ip: "100.100.100.200"},
		"API server":          {ip: "10.96.0.1"},
		"node":                {ip: "192.168.1.5"},
		"a model hub":         {ip: "18.164.174.55"},
	}
	allowed := map[conn]bool{
		// Pools: DNS and evalsid, nothing else; nothing in.
		tcp("judge", "kube-dns", 53):                  true,
		{"judge", "kube-dns", 53, corev1.ProtocolUDP}: true,
		tcp("judge", "evalsid", 8443):                 true,
		tcp("judge", "evalsid", 9090):                 false,
		tcp("judge", "evalsid's neighbour", 8443):     false,
		tcp("sandbox", "evalsid's neighbour", 8443):   false,
		tcp("judge", "kube-system's", 2379):           false,
		tcp("judge", "team-a's pod", 8080):            false,
		tcp("judge", "team-b judge", 8080):            false,
		tcp("judge", "metadata", 80):                  false,
		tcp("judge", "azure wire", 80):                false,
		tcp("judge", "API server", 443):               false,
		tcp("judge", "node", 10250):                   false,
		tcp("judge", "a model hub", 443):              false,
		tcp("team-a's pod", "judge", 8080):            false,
		tcp("sandbox", "evalsid", 8443):               true,
		tcp("sandbox", "kube-dns", 53):                true,
		tcp("sandbox", "judge", 8080):                 false,
		tcp("sandbox", "metadata", 80):                false,
		tcp("sandbox", "alibaba meta", 80):            false,
		tcp("sandbox", "a model hub", 443):            false,
		tcp("team-a's pod", "sandbox", 8080):          false,
		tcp("judge", "sandbox", 8080):                 false,
		// A CheckpointServer: its namespace's pools and labelled clients, on its port only.
		tcp("judge", "qwen", 8000):          true,
		tcp("client of qwen", "qwen", 8000): true,
		tcp("judge", "qwen", 9000):          false,
		tcp("team-a's pod", "qwen", 8000):   false,
		tcp("team-b judge", "qwen", 8000):   false,
		tcp("sandbox", "qwen", 8000):        false,
		tcp("client of qwen", "step", 8000): false,
		// Out: DNS and what its spec names, nothing by default: not the public hub its model id
		// names, not private or metadata addresses.
		tcp("qwen", "kube-dns", 53):         true,
		tcp("qwen", "a model hub", 443):     false,
		tcp("mirrored", "the mirror", 443):  true,
		tcp("mirrored", "the mirror", 80):   false,
		tcp("mirrored", "a model hub", 443): false,
		tcp("mirrored", "metadata", 80):     false,
		tcp("qwen", "metadata", 80):         false,
		tcp("qwen", "azure wire", 443):      false,
		tcp("qwen", "alibaba meta", 443):    false,
		tcp("qwen", "API server", 443):      false,
		tcp("qwen", "node", 443):            false,
		tcp("qwen", "team-a's pod", 443):    false,
		tcp("qwen", "evalsid", 8443):        false,
		// One that loads from its claim reaches nothing but DNS.
		tcp("step", "kube-dns", 53):     true,
		tcp("step", "a model hub", 443): false,
	}
	check(t, engine, pods, allowed, nil)
}

// conn is a connection from one endpoint of a matrix to another, on a port.
type conn struct {
	from, to string
	port     int
	protocol corev1.Protocol
}

func tcp(from, to string, port int) conn { return conn{from, to, port, corev1.ProtocolTCP} }

// check asks engine about each connection of allowed between pods and reports every wrong answer.
// named gives, by pod, the names of its container ports, which policies may name.
func check(t *testing.T, engine *matcher.Policy, pods map[string]endpoint, allowed map[conn]bool, named map[string]map[int]string) {
	t.Helper()
	var wrong []string
	for c, want := range allowed {
		got := engine.IsTrafficAllowed(&matcher.Traffic{
			Source: pods[c.from].peer(), Destination: pods[c.to].peer(),
			ResolvedPort: c.port, ResolvedPortName: named[c.to][c.port], Protocol: c.protocol,
		}).IsAllowed()
		if got != want {
			wrong = append(wrong, fmt.Sprintf("%s -> %s %d/%s: allowed %v, want %v", c.from, c.to, c.port, c.protocol, got, want))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("the rendered NetworkPolicies decide %d connections wrongly:\n%s", len(wrong), strings.Join(wrong, "\n"))
	}
}

// TestPodRungMatrix renders a pod rung class with the API server's address named: its launcher
// reaches the API server there and evalsid, nothing public; its trials (the trial shape's pods)
// reach DNS and what the class opens alone: not evalsid (a trial has no token and needs none),
// never the API server, and nothing reaches either.
func TestPodRungMatrix(t *testing.T) {
	opts := render.Options{DefaultImage: "evalsi/platform:1.4.0", SandboxNamespace: "evalsi-sandbox",
		APIURL: "https://evalsid.evalsi-platform.svc:8443", KubernetesAPICIDRs: []string{"10.0.0.1/32"}}
	class := object("SandboxClass", "", "trials", map[string]any{"rung": "pod", "trialImages": []any{"python:3.13-slim"},
		"egress": []any{map[string]any{"to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "151.101.0.0/16"}}}, "ports": []any{map[string]any{"port": int64(443)}}}}})
	policies, shapes := renderedPods(t, opts, class)
	launcher, trial := shapes["Deployment"], shapes["PodTemplate"]
	if launcher == nil || trial == nil {
		t.Fatal("the pod rung rendered no launcher or no trial shape")
	}
	pods := map[string]endpoint{
		"launcher":        {"evalsi-sandbox", launcher, "10.244.3.10"},
		"trial":           {"evalsi-sandbox", trial, "10.244.3.11"},
		"evalsid":         {"evalsi-platform", map[string]string{"app.kubernetes.io/name": "evalsid"}, "10.244.4.10"},
		"kube-dns":        {"kube-system", map[string]string{"k8s-app": "kube-dns"}, "10.244.0.10"},
		"team-a's pod":    {"team-a", map[string]string{"app": "notebook"}, "10.244.1.31"},
		"the API server":  {ip: "10.0.0.1"},
		"a public host":   {ip: "18.164.174.55"},
		"metadata":        {ip: "169.254.169.254"},
		"a package index": {ip: "151.101.0.223"},
	}
	check(t, matcher.BuildNetworkPolicies(false, policies), pods, map[conn]bool{
		tcp("trial", "a package index", 443):    true,
		tcp("trial", "a package index", 80):     false,
		tcp("launcher", "the API server", 443):  true,
		tcp("launcher", "the API server", 6443): true,
		tcp("launcher", "a public host", 443):   false,
		tcp("launcher", "metadata", 80):         false,
		tcp("launcher", "evalsid", 8443):        true,
		tcp("trial", "evalsid", 8443):           false,
		tcp("trial", "kube-dns", 53):            true,
		tcp("trial", "the API server", 443):     false,
		tcp("trial", "a public host", 443):      false,
		tcp("trial", "metadata", 80):            false,
		tcp("trial", "launcher", 8080):          false,
		tcp("team-a's pod", "trial", 8080):      false,
		tcp("team-a's pod", "launcher", 8080):   false,
	}, nil)
}

// TestNetworkPolicyMatrixOutsideEvalsid renders pools for an evalsid outside the cluster, whose
// addresses the platform names: the pools reach those addresses on evalsid's port and nothing else
// public, and without the platform's CIDRs the operator refuses to start (never every public
// address by default).
func TestNetworkPolicyMatrixOutsideEvalsid(t *testing.T) {
	opts := render.Options{DefaultImage: "evalsi/platform:1.4.0", SandboxNamespace: "evalsi-sandbox",
		APIURL: "https://evalsid.evals.example", APIPeers: []any{map[string]any{"ipBlock": map[string]any{"cidr": "203.0.113.8/29"}}}}
	var policies []*networkingv1.NetworkPolicy
	judge, judgeLabels := rendered(t, opts, object("Evaluator", "team-a", "judge", map[string]any{}))
	sandbox, sandboxLabels := rendered(t, opts, object("SandboxClass", "", "landlock", map[string]any{"rung": "landlock"}))
	policies = append(append(policies, judge...), sandbox...)
	engine := matcher.BuildNetworkPolicies(false, policies)
	pods := map[string]endpoint{
		"judge":       {"team-a", judgeLabels, "10.244.1.10"},
		"sandbox":     {"evalsi-sandbox", sandboxLabels, "10.244.3.10"},
		"evalsid":     {ip: "203.0.113.10"},
		"a model hub": {ip: "18.164.174.55"},
		"metadata":    {ip: "169.254.169.254"},
		"team-a's":    {"team-a", map[string]string{"app": "notebook"}, "10.244.1.31"},
	}
	check(t, engine, pods, map[conn]bool{
		tcp("judge", "evalsid", 443):       true,
		tcp("judge", "evalsid", 22):        false,
		tcp("judge", "a model hub", 443):   false,
		tcp("judge", "metadata", 80):       false,
		tcp("judge", "team-a's", 443):      false,
		tcp("sandbox", "evalsid", 443):     true,
		tcp("sandbox", "a model hub", 443): false,
	}, nil)
	opts.APIPeers = nil
	if err := render.CheckAPIEgress(opts); err == nil || !strings.Contains(err.Error(), "outside the cluster") {
		t.Errorf("an outside evalsid without the platform's CIDRs: %v, want a refusal", err)
	}
}
