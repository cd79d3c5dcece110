package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// clusterDNSIP is the ClusterIP of the kube-dns Service, which the kubelet gives pods as their
// nameserver.
const clusterDNSIP = "10.0.0.10"

// startNodeNetwork starts, as processes of the node, what a cluster's network add-ons do:
// kube-proxy (iptables) and CoreDNS behind the kube-dns Service; startPolicyController adds
// NetworkPolicies. Each sees only the test's network namespace.
func (c *Cluster) startNodeNetwork(ctx context.Context) error {
	n := c.Node
	proxyConfig := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(proxyConfig, []byte(n.kubeProxyConfig(c.Kubeconfig)), 0o644); err != nil {
		return err
	}
	proxy, err := startProcess(n.dir, "kube-proxy", n.bins.KubeProxy, nil, "--config", proxyConfig)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, proxy)
	corefile := filepath.Join(n.dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(corefileFor(c.Kubeconfig)), 0o644); err != nil {
		return err
	}
	dns, err := startProcess(n.dir, "coredns", n.bins.CoreDNS, nil, "-conf", corefile)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, dns)
	if err := c.createDNSService(ctx); err != nil {
		return fmt.Errorf("creating the kube-dns Service: %w", err)
	}
	return nil
}

// startPolicyController starts kube-router's NetworkPolicy controller once the node is
// registered (it finds its node by name at start) and waits until its chains are in place.
func (c *Cluster) startPolicyController(ctx context.Context) error {
	n := c.Node
	p, err := startProcess(n.dir, "kube-router", n.bins.KubeRouter, nil,
		"--kubeconfig="+c.Kubeconfig, "--hostname-override="+n.Name,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--run-loadbalancer=false",
		"--enable-cni=false", "--health-port=0", "--metrics-port=0",
		"--service-cluster-ip-range=10.0.0.0/24")
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return p.poll(ctx, 200*time.Millisecond, func(ctx context.Context) error {
		return n.run(ctx, "iptables", "-S", "KUBE-ROUTER-FORWARD")
	})
}

// kubeProxyConfig leaves alone what is the machine's, not the namespace's: the conntrack table's
// size and timeouts, and localhost node ports (route_localnet).
func (n *RealNode) kubeProxyConfig(kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
bindAddress: %s
healthzBindAddress: ""
metricsBindAddress: ""
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, udpTimeout: 0s, udpStreamTimeout: 0s}
`, kubeconfig, n.Name, podSubnet, realNodeIP)
}

// corefileFor answers the cluster's names from the API server on the node's address, as
// kube-dns's endpoint; it forwards nothing, since nothing outside the namespace answers.
func corefileFor(kubeconfig string) string {
	return fmt.Sprintf(`.:53 {
    bind %s
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
`, realNodeIP, kubeconfig)
}

// createDNSService points the kube-dns Service, at clusterDNSIP, at CoreDNS on the node's address.
func (c *Cluster) createDNSService(ctx context.Context) error {
	cs := c.Clientset()
	ports := []corev1.ServicePort{
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterDNSIP, Ports: ports},
	}
	if _, err := cs.CoreV1().Services("kube-system").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	var slicePorts []discoveryv1.EndpointPort
	for _, p := range ports {
		slicePorts = append(slicePorts, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(p.Port)})
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-node", Namespace: "kube-system",
			Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns", discoveryv1.LabelManagedBy: "evalsi-cluster"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{realNodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       slicePorts,
	}
	_, err := cs.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, slice, metav1.CreateOptions{})
	return err
}
