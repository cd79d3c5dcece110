package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const (
	// clusterDNSIP is the ClusterIP of the kube-dns Service, which the kubelet gives pods as their
	// nameserver.
	clusterDNSIP = "10.0.0.10"
	// coreDNSImage is the image of the CoreDNS binary the node runs as cluster DNS.
	coreDNSImage = "evalsi.test/coredns:" + CoreDNSVersion
)

// startNodeNetwork starts what a cluster's network add-ons are: kube-proxy (iptables) as a
// process of the node, and CoreDNS as the pods of the kube-dns Service in kube-system, as
// clusters run it (NetworkPolicies name those pods: k8s-app=kube-dns). startPolicyController
// adds NetworkPolicies. Each sees only the test's network namespace.
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
	if err := n.Import(ctx, Image{Ref: coreDNSImage, Files: map[string]string{"/coredns": n.bins.CoreDNS},
		Entrypoint: []string{"/coredns"}, User: "65532"}); err != nil {
		return err
	}
	if err := c.createClusterDNS(ctx); err != nil {
		return fmt.Errorf("creating cluster DNS: %w", err)
	}
	return nil
}

// startPolicyController starts kube-router's NetworkPolicy controller alone (iptables and ipset;
// its routing and service proxy off) once the node is registered (it finds its node by name at
// start), and waits until its chains are in place.
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

// corefile answers the cluster's names from the API server, as its service account; it forwards
// nothing, since nothing outside the namespace answers.
const corefile = `.:53 {
    errors
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
`

// createClusterDNS creates CoreDNS in kube-system as clusters have it: a Deployment of pods
// labelled k8s-app=kube-dns behind the kube-dns Service at clusterDNSIP, running as its own
// service account with the rights of Kubernetes' system:coredns, restricted (a non-root user,
// port 53 through the pod's unprivileged port sysctl).
func (c *Cluster) createClusterDNS(ctx context.Context) error {
	cs := c.Clientset()
	const ns, name = "kube-system", "coredns"
	labels := map[string]string{"k8s-app": "kube-dns"}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	config := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"Corefile": corefile}}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					DNSPolicy:          corev1.DNSDefault,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						Sysctls:        []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "53"}}},
					Containers: []corev1.Container{{
						Name: "coredns", Image: coreDNSImage, ImagePullPolicy: corev1.PullNever,
						Args: []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: &corev1.Probe{PeriodSeconds: 1,
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}},
				},
			},
		},
	}
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{ClusterIP: clusterDNSIP, Selector: labels, Ports: []corev1.ServicePort{
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
		}},
	}
	create := metav1.CreateOptions{}
	for _, step := range []func() error{
		func() error { _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, create); return err },
		func() error { _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, create); return err },
		func() error { _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, account, create); return err },
		func() error { _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, config, create); return err },
		func() error { _, err := cs.CoreV1().Services(ns).Create(ctx, service, create); return err },
		func() error { _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment, create); return err },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// waitClusterDNS waits until the CoreDNS Deployment has a Ready pod.
func (c *Cluster) waitClusterDNS(ctx context.Context) error {
	return c.poll(ctx, 200*time.Millisecond, func(ctx context.Context) error {
		d, err := c.Clientset().AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas < 1 {
			return fmt.Errorf("CoreDNS has no Ready pod")
		}
		return nil
	})
}
