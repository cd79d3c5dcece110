package render

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"evals.si/operator/evalsi"
)

// Pools run code the platform does not review: an evaluator's plugins, and in sandboxes the code
// a model wrote. Each pool gets a NetworkPolicy that admits no traffic in, and lets its pods reach
// only cluster DNS, evalsid and what its spec opens (spec.egress, NetworkPolicy egress rules as
// Kubernetes takes them): not the API server, not a cloud's metadata endpoint, not the cluster's
// other Services. The policy needs a CNI that enforces NetworkPolicies (Calico, Cilium,
// Antrea, and the cloud CNIs with policy enabled); on one that does not, it is inert.

// EgressRule is a NetworkPolicy egress rule, as Kubernetes takes it: where a pool's pods may
// connect besides cluster DNS and evalsid (spec.egress of Evaluators and SandboxClasses).
type EgressRule struct {
	To    []NetworkPeer `json:"to,omitempty"`
	Ports []NetworkPort `json:"ports,omitempty"`
}

// NetworkPeer is one destination of an EgressRule.
type NetworkPeer struct {
	IPBlock           *IPBlock              `json:"ipBlock,omitempty"`
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	PodSelector       *metav1.LabelSelector `json:"podSelector,omitempty"`
}

// IPBlock is a range of addresses, less some of its parts.
type IPBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

// NetworkPort is a port, or a range of ports, of an EgressRule.
type NetworkPort struct {
	Protocol string `json:"protocol,omitempty"`
	Port     *int32 `json:"port,omitempty"`
	EndPort  *int32 `json:"endPort,omitempty"`
}

// checkEgress applies the API server's rules of NetworkPolicy egress rules that the schema
// cannot say: valid CIDRs, exceptions inside their block, selectors, and a range's end after its
// start.
func checkEgress(p pointer, rules []EgressRule, ps *problems) {
	for i, r := range rules {
		at := p.index(i)
		for j, peer := range r.To {
			pat := at.at("to").index(j)
			set := 0
			for _, s := range []bool{peer.IPBlock != nil, peer.NamespaceSelector != nil, peer.PodSelector != nil} {
				if s {
					set++
				}
			}
			switch {
			case set == 0:
				ps.add(pat, "a peer sets ipBlock, namespaceSelector or podSelector")
			case peer.IPBlock != nil && set > 1:
				ps.add(pat.at("ipBlock"), "an ipBlock peer sets no selector")
			}
			if b := peer.IPBlock; b != nil {
				_, block, err := net.ParseCIDR(b.CIDR)
				if err != nil {
					ps.add(pat.at("ipBlock").at("cidr"), "%q is not a CIDR such as \"10.0.0.0/16\"", b.CIDR)
				}
				if m := metadataRangeHolding(block); m != "" {
					ps.add(pat.at("ipBlock").at("cidr"), "%s lies in %s, where clouds serve instance metadata and credentials: a pool may never reach it", b.CIDR, m)
				}
				for k, e := range b.Except {
					_, except, err := net.ParseCIDR(e)
					switch {
					case err != nil:
						ps.add(pat.at("ipBlock").at("except").index(k), "%q is not a CIDR such as \"10.0.1.0/24\"", e)
					case block != nil && !strictlyInside(except, block):
						ps.add(pat.at("ipBlock").at("except").index(k), "%s is not inside %s (a smaller part of it)", e, b.CIDR)
					}
				}
			}
			if s := peer.NamespaceSelector; s != nil {
				checkLabelSelector(pat.at("namespaceSelector"), s, ps)
			}
			if s := peer.PodSelector; s != nil {
				checkLabelSelector(pat.at("podSelector"), s, ps)
			}
		}
		for j, port := range r.Ports {
			if port.EndPort == nil {
				continue
			}
			switch {
			case port.Port == nil:
				ps.add(at.at("ports").index(j).at("endPort"), "endPort needs port, the start of the range")
			case *port.EndPort < *port.Port:
				ps.add(at.at("ports").index(j).at("endPort"), "must not be below port")
			}
		}
	}
}

// metadataRanges are where clouds serve instance metadata and credentials, which no pool may
// reach, whatever its spec.egress opens: IPv4 link-local addresses (169.254.169.254 on AWS,
// Google Cloud, Azure, Oracle, DigitalOcean and Huawei; Tencent's 169.254.0.23; AWS's container
// and Pod Identity credentials at 169.254.170.2 and 169.254.170.23), Azure's WireServer
// (168.63.129.16, which hands out a VM's extensions and their settings), Alibaba Cloud's metadata
// (100.100.100.200), and the IPv6 addresses of AWS's metadata, its Pod Identity agent, and Google
// Cloud's metadata.
var metadataRanges = parseCIDRs("169.254.0.0/16", "168.63.129.16/32", "100.100.100.200/32",
	"fd00:ec2::254/128", "fd00:ec2::23/128", "fd20:ce::254/128")

// parseCIDRs parses CIDRs written in this file.
func parseCIDRs(cidrs ...string) []*net.IPNet {
	out := make([]*net.IPNet, len(cidrs))
	for i, c := range cidrs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			panic(err)
		}
		out[i] = n
	}
	return out
}

// strictlyInside reports whether inner is a smaller part of outer, as NetworkPolicy takes an
// ipBlock's exceptions.
func strictlyInside(inner, outer *net.IPNet) bool {
	innerBits, _ := inner.Mask.Size()
	outerBits, _ := outer.Mask.Size()
	return outer.Contains(inner.IP) && innerBits > outerBits
}

// metadataRangeHolding returns the metadata range that block lies in (or is), "" for none.
func metadataRangeHolding(block *net.IPNet) string {
	if block == nil {
		return ""
	}
	for _, r := range metadataRanges {
		if r.Contains(block.IP) && !strictlyInside(r, block) {
			return r.String()
		}
	}
	return ""
}

// withoutMetadata returns b with every metadata range that its CIDR holds and its exceptions do
// not already leave out added to them, so that an ipBlock as wide as 0.0.0.0/0 still does not
// reach a cloud's metadata endpoint (NetworkPolicy rules add up: the rule for evalsid leaves the
// range out, so no rule lets it in).
func withoutMetadata(b IPBlock) IPBlock {
	_, block, err := net.ParseCIDR(b.CIDR)
	if err != nil {
		return b // refused by checkEgress
	}
	for _, r := range metadataRanges {
		if !strictlyInside(r, block) || slices.ContainsFunc(b.Except, func(e string) bool {
			_, except, err := net.ParseCIDR(e)
			return err == nil && except.Contains(r.IP) && !strictlyInside(except, r)
		}) {
			continue
		}
		b.Except = append(slices.Clip(b.Except), r.String())
	}
	return b
}

// appendEgress appends rules to egress as the maps of a NetworkPolicy's spec.egress, each ipBlock
// without the metadata ranges.
func appendEgress(egress []any, rules []EgressRule) []any {
	for _, r := range rules {
		r.To = slices.Clone(r.To)
		for i, peer := range r.To {
			if peer.IPBlock != nil {
				b := withoutMetadata(*peer.IPBlock)
				r.To[i].IPBlock = &b
			}
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&r)
		if err != nil {
			continue // a checked rule always converts
		}
		egress = append(egress, m)
	}
	return egress
}

// dnsEgress lets pods resolve names with the cluster's DNS (kube-system's kube-dns pods, which
// CoreDNS keeps the label of).
func dnsEgress() map[string]any {
	return map[string]any{
		"to": []any{map[string]any{
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "kube-system"}},
			"podSelector":       map[string]any{"matchLabels": map[string]any{"k8s-app": "kube-dns"}},
		}},
		"ports": []any{
			map[string]any{"protocol": "UDP", "port": int64(53)},
			map[string]any{"protocol": "TCP", "port": int64(53)},
		},
	}
}

// EvalsidPodLabels are the labels by which pools reach evalsid's pods when its URL names a Service
// and the platform names no peers (Options.APIPeers): a platform's evalsid pods carry them.
var EvalsidPodLabels = map[string]any{evalsi.LabelName: "evalsid"}

// apiEgress is the egress rule that lets pods reach evalsid, on its pods' port alone
// (Options.APIPort, else the URL's): to the peers the platform named (Options.APIPeers), else to
// what evalsid's URL names:
//   - an IP address: that address alone;
//   - a Service, <service>.<namespace>.svc[.cluster.local] or a short name (a Service of the
//     pool's own namespace): the pods of that namespace labelled EvalsidPodLabels, not every pod
//     of it;
//   - any other host, outside the cluster: nothing. A policy cannot name a host, and every
//     public address is more than a pool needs: the platform names evalsid's addresses as
//     ipBlock peers (CheckAPIEgress refuses options that leave them out).
func apiEgress(opts Options) map[string]any {
	u, port, err := apiAddress(opts)
	if err != nil {
		return nil
	}
	rule := func(to ...any) map[string]any {
		return map[string]any{"to": to, "ports": []any{map[string]any{"protocol": "TCP", "port": int64(port)}}}
	}
	if len(opts.APIPeers) > 0 {
		return rule(opts.APIPeers...)
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		bits := "/32"
		if ip.To4() == nil {
			bits = "/128"
		}
		return rule(map[string]any{"ipBlock": map[string]any{"cidr": ip.String() + bits}})
	}
	pods := map[string]any{"podSelector": map[string]any{"matchLabels": maps.Clone(EvalsidPodLabels)}}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	switch {
	case len(labels) == 1:
		return rule(pods)
	case len(labels) >= 3 && labels[2] == "svc":
		pods["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": labels[1]}}
		return rule(pods)
	}
	return nil
}

// apiAddress parses evalsid's URL and the port its pods serve on.
func apiAddress(opts Options) (*url.URL, int32, error) {
	u, err := url.Parse(opts.APIURL)
	if err != nil || u.Hostname() == "" {
		return nil, 0, fmt.Errorf("api URL %q: not an absolute URL", opts.APIURL)
	}
	if opts.APIPort < 0 || opts.APIPort > 65535 {
		return nil, 0, fmt.Errorf("api port %d is not a port", opts.APIPort)
	}
	if opts.APIPort != 0 {
		return u, opts.APIPort, nil
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil || n <= 0 || n > 65535 {
		return nil, 0, fmt.Errorf("api URL %q: port %q is not a port", opts.APIURL, port)
	}
	return u, int32(n), nil
}

// CheckAPIEgress says why the pools the operator renders could not reach evalsid through their
// NetworkPolicy with opts: a URL that does not parse, or an evalsid outside the cluster (a host
// name that is not a Service) whose addresses the platform did not name in APIPeers.
func CheckAPIEgress(opts Options) error {
	if _, _, err := apiAddress(opts); err != nil {
		return err
	}
	if apiEgress(opts) == nil {
		return fmt.Errorf("evalsid at %s is outside the cluster: name its addresses as NetworkPolicy peers (ipBlock CIDRs: the pools' NetworkPolicies open nothing wider, never every public address)", opts.APIURL)
	}
	return nil
}

// networkPolicy renders the NetworkPolicy of a pool named name, for the owner's pods of component
// alone (a pod rung class's trials have their own): no ingress, egress to DNS, evalsid and the
// spec's own rules.
func (o Owner) networkPolicy(name, namespace, component string, extra []EgressRule, opts Options) *unstructured.Unstructured {
	egress := []any{dnsEgress()}
	if api := apiEgress(opts); api != nil {
		egress = append(egress, api)
	}
	egress = appendEgress(egress, extra)
	return o.egressPolicy(name, namespace, component, egress)
}

// egressPolicy renders a NetworkPolicy of the owner's pods of component: nothing in, out only by
// the egress rules given.
func (o Owner) egressPolicy(name, namespace, component string, egress []any) *unstructured.Unstructured {
	pods := o.selector()
	pods[evalsi.LabelComponent] = component
	return o.object("networking.k8s.io/v1", "NetworkPolicy", name, namespace, component, map[string]any{"spec": map[string]any{
		"podSelector": map[string]any{"matchLabels": pods},
		"policyTypes": []any{"Ingress", "Egress"},
		"egress":      egress,
	}})
}

// checkpointServersEgress lets an Evaluator's pool reach the CheckpointServers of its namespace
// (their pods; each server's policy admits the pool on its port alone).
var checkpointServersEgress = EgressRule{To: []NetworkPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
	evalsi.LabelManagedBy: evalsi.ManagedBy,
	evalsi.LabelName:      "checkpointserver",
}}}}}

// CheckpointClientLabel marks a pod of a CheckpointServer's namespace, besides its Evaluator
// pools, that may call the server: evals.si/checkpoint-client=<CheckpointServer name>.
const CheckpointClientLabel = evalsi.Group + "/checkpoint-client"

// checkpointPolicy renders the NetworkPolicy of a CheckpointServer's pods. In: on the server's
// port only, from the Evaluator pools of its namespace (which work the runs that target it) and
// the namespace's pods labelled CheckpointClientLabel with its name; nothing from another
// namespace. Out: cluster DNS and the spec's egress rules alone (a NetworkPolicy cannot name a
// model hub by its host name, and all public addresses is more than a download needs).
func (o Owner) checkpointPolicy(name, namespace string, port int32, spec CheckpointServerSpec) *unstructured.Unstructured {
	egress := []any{dnsEgress()}
	egress = appendEgress(egress, spec.Egress)
	ingress := map[string]any{
		"from": []any{
			map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{
				evalsi.LabelManagedBy: evalsi.ManagedBy,
				evalsi.LabelName:      "evaluator",
			}}},
			map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{CheckpointClientLabel: o.Name}}},
		},
		"ports": []any{map[string]any{"protocol": "TCP", "port": int64(port)}},
	}
	return o.object("networking.k8s.io/v1", "NetworkPolicy", name, namespace, "model-server", map[string]any{"spec": map[string]any{
		"podSelector": map[string]any{"matchLabels": o.selector()},
		"policyTypes": []any{"Ingress", "Egress"},
		"ingress":     []any{ingress},
		"egress":      egress,
	}})
}
