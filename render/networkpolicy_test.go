package render

import (
	"net"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/isolation"
)

// admits reports whether an egress rule's peer lets pods reach ip: an ipBlock that holds it and
// no exception of which does, or a selector (which selects pods, never an outside address).
func admits(peer map[string]any, ip net.IP) bool {
	block, ok := peer["ipBlock"].(map[string]any)
	if !ok {
		return false
	}
	_, cidr, err := net.ParseCIDR(block["cidr"].(string))
	if err != nil || !cidr.Contains(ip) {
		return false
	}
	except, _ := block["except"].([]any)
	for _, e := range except {
		if _, x, err := net.ParseCIDR(e.(string)); err == nil && x.Contains(ip) {
			return false
		}
	}
	return true
}

// TestPoolNetworkPoliciesFence renders an Evaluator and a sandbox pool with evalsid at each kind
// of address: each pool's NetworkPolicy admits no ingress, lets the pods reach DNS and evalsid
// only, and no rule admits a cloud's metadata endpoint or the API server's usual addresses (a
// Service ClusterIP, a private node address, loopback), nor selects every pod.
func TestPoolNetworkPoliciesFence(t *testing.T) {
	forbidden := []string{"169.254.169.254", "10.96.0.1", "172.20.0.1", "192.168.1.10", "127.0.0.1", "100.64.0.1"}
	pools := map[string]*unstructured.Unstructured{
		"Evaluator": {Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
			"metadata": map[string]any{"name": "judge", "namespace": "team-a", "uid": "u"}, "spec": map[string]any{}}},
		"SandboxClass": {Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass",
			"metadata": map[string]any{"name": "landlock", "uid": "u"}, "spec": map[string]any{"rung": "landlock"}}},
	}
	for name, api := range map[string]Options{
		"a Service name":            {APIURL: "http://evalsid.evalsi.svc:8080"},
		"a fully qualified name":    {APIURL: "https://evalsid.platform.svc.cluster.local"},
		"an address":                {APIURL: "http://10.200.0.7:8080"},
		"a host outside, its CIDRs": {APIURL: "https://evals.example.com", APIPeers: []any{map[string]any{"ipBlock": map[string]any{"cidr": "203.0.113.10/32"}}}},
		"peers given by the chart":  {APIURL: "http://evalsid:8080", APIPeers: []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/component": "evalsid"}}}}},
	} {
		for kind, obj := range pools {
			t.Run(name+"/"+kind, func(t *testing.T) {
				opts := goldenOptions
				opts.APIURL, opts.APIPeers = api.APIURL, api.APIPeers
				res, err := Object(obj, opts)
				if err != nil {
					t.Fatal(err)
				}
				var policy *unstructured.Unstructured
				for _, o := range res.Objects {
					if o.GetKind() == "NetworkPolicy" {
						policy = o
					}
				}
				if policy == nil {
					t.Fatal("no NetworkPolicy")
				}
				types, _, _ := unstructured.NestedStringSlice(policy.Object, "spec", "policyTypes")
				if len(types) != 2 {
					t.Errorf("policyTypes %v, want Ingress and Egress", types)
				}
				if _, has := policy.Object["spec"].(map[string]any)["ingress"]; has {
					t.Error("the policy admits ingress")
				}
				egress, _, _ := unstructured.NestedSlice(policy.Object, "spec", "egress")
				want := 2 // DNS and evalsid
				if kind == "Evaluator" {
					want = 3 // and the namespace's CheckpointServers
				}
				if len(egress) != want {
					t.Errorf("%d egress rules, want %d", len(egress), want)
				}
				for i, r := range egress {
					to, _ := r.(map[string]any)["to"].([]any)
					if len(to) == 0 {
						t.Errorf("egress rule %d has no destination, so admits every one", i)
					}
					for _, p := range to {
						peer := p.(map[string]any)
						if sel, ok := peer["podSelector"].(map[string]any); ok && len(sel) == 0 && peer["namespaceSelector"] == nil {
							t.Errorf("egress rule %d selects every pod of the namespace", i)
						}
						for _, addr := range forbidden {
							if admits(peer, net.ParseIP(addr)) {
								t.Errorf("egress rule %d admits %s: %v", i, addr, peer)
							}
						}
					}
				}
			})
		}
	}
}

// TestOpenEgressNeverReachesMetadata renders pools whose spec.egress opens every address (and a
// block around the link-local range that leaves out only part of it): no rule of their
// NetworkPolicies admits a cloud's metadata or credentials address, while the rest stays open.
func TestOpenEgressNeverReachesMetadata(t *testing.T) {
	metadata := []string{"169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::254", "fd00:ec2::23", "fd20:ce::254"}
	open := []string{"8.8.8.8", "169.255.0.1", "2001:db8::1"}
	egress := []any{map[string]any{"to": []any{
		map[string]any{"ipBlock": map[string]any{"cidr": "0.0.0.0/0"}},
		map[string]any{"ipBlock": map[string]any{"cidr": "::/0"}},
		map[string]any{"ipBlock": map[string]any{"cidr": "169.254.0.0/15", "except": []any{"169.254.169.0/24"}}},
	}}}
	for kind, obj := range map[string]*unstructured.Unstructured{
		"Evaluator": {Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "Evaluator",
			"metadata": map[string]any{"name": "judge", "namespace": "team-a", "uid": "u"}, "spec": map[string]any{"egress": egress}}},
		"SandboxClass": {Object: map[string]any{"apiVersion": "evals.si/v1alpha1", "kind": "SandboxClass",
			"metadata": map[string]any{"name": "landlock", "uid": "u"}, "spec": map[string]any{"rung": "landlock", "egress": egress}}},
	} {
		t.Run(kind, func(t *testing.T) {
			res, err := Object(obj, goldenOptions)
			if err != nil {
				t.Fatal(err)
			}
			reached := map[string]bool{}
			for _, o := range res.Objects {
				if o.GetKind() != "NetworkPolicy" {
					continue
				}
				rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "egress")
				for _, r := range rules {
					to, _ := r.(map[string]any)["to"].([]any)
					for _, p := range to {
						for _, addr := range append(metadata, open...) {
							reached[addr] = reached[addr] || admits(p.(map[string]any), net.ParseIP(addr))
						}
					}
				}
			}
			for _, addr := range metadata {
				if reached[addr] {
					t.Errorf("a rule admits %s, a metadata address", addr)
				}
			}
			for _, addr := range open {
				if !reached[addr] {
					t.Errorf("no rule admits %s, which the spec opens", addr)
				}
			}
		})
	}
}

// TestProbeDialsEveryMetadataRange: the isolation probe dials an address of each range every
// pool's NetworkPolicy keeps its pods from, and only addresses of those ranges, so that a floor
// met says each of them is shut.
func TestProbeDialsEveryMetadataRange(t *testing.T) {
	var ips []net.IP
	for _, addr := range isolation.MetadataAddresses {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		ip := net.ParseIP(host)
		if ip == nil {
			t.Fatalf("%s: not an address", addr)
		}
		if !slices.ContainsFunc(metadataRanges, func(r *net.IPNet) bool { return r.Contains(ip) }) {
			t.Errorf("the probe dials %s, in none of the ranges the NetworkPolicies shut", addr)
		}
		ips = append(ips, ip)
	}
	for _, r := range metadataRanges {
		if !slices.ContainsFunc(ips, r.Contains) {
			t.Errorf("no probe target in %s, a range the NetworkPolicies shut", r)
		}
	}
}
