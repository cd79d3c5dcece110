package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"evals.si/operator/evalsi"
)

// StopAPIServer kills kube-apiserver, as an outage does: clients' connections are refused until
// StartAPIServer. Everything else keeps running.
func (c *Cluster) StopAPIServer() {
	if p := c.process("kube-apiserver"); p != nil {
		p.stop(0)
	}
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, with the same port and
// arguments, and returns once it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	n, err := c.restartExited("kube-apiserver")
	if err != nil || n == nil {
		return err
	}
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		return err
	}
	return n.poll(ctx, 100*time.Millisecond, httpOK(hc, c.Config.Host+"/readyz"))
}

// restartExited starts the component called name again when it has exited, and returns it (nil
// when it still runs).
func (c *Cluster) restartExited(name string) (*process, error) {
	c.procsMu.Lock()
	defer c.procsMu.Unlock()
	for i, p := range c.procs {
		if p.name != name {
			continue
		}
		if !p.exited() {
			return nil, nil
		}
		n, err := p.restart()
		if err != nil {
			return nil, err
		}
		c.procs[i] = n
		return n, nil
	}
	return nil, fmt.Errorf("no %s to start", name)
}

func (c *Cluster) startAPIServer(ctx context.Context, bin, etcdURL string) error {
	ports, err := freePortList(1)
	if err != nil {
		return err
	}
	if c.Node != nil {
		// The port a cluster's API server serves on, which charts' NetworkPolicies open (a
		// policy sees the port kube-proxy translated the kubernetes Service's 443 to); the
		// test's network namespace is the node's own.
		ports[0] = 6443
	}
	host := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	egress, err := c.net.writeEgressConfig(c.Dir)
	if err != nil {
		return err
	}
	var extra []string
	if c.opts.AuditPolicy != "" {
		policy := filepath.Join(c.Dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(c.opts.AuditPolicy), 0o600); err != nil {
			return err
		}
		c.AuditLog = filepath.Join(c.Dir, "audit.log")
		// Blocking mode writes each event as its request completes, so a reader that notes the
		// log's size at a moment counts exactly the requests completed before it.
		extra = []string{"--audit-policy-file=" + policy, "--audit-log-path=" + c.AuditLog,
			"--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0"}
	}
	if len(c.opts.FeatureGates) > 0 {
		extra = append(extra, "--feature-gates="+strings.Join(c.opts.FeatureGates, ","))
	}
	admission, err := writeAdmissionConfig(c.Dir, c.pki)
	if err != nil {
		return err
	}
	extra = append(extra, "--admission-control-config-file="+admission)
	// Without a real node, Services are played by the service network: the kubernetes Service
	// cannot point at a loopback address, and the API server reaches webhooks and aggregated APIs
	// by Service through the service network's proxy. With one, the API server listens on the
	// node's address too (all inside the test's network namespace), which the kubernetes Service
	// points at, and reaches Services through kube-proxy's rules like any process of the node.
	network := []string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none", "--egress-selector-config-file=" + egress}
	if c.Node != nil {
		// It reaches the kubelet (logs, exec) at the node's address, since nothing resolves its
		// name, as the harness's admin, whom the kubelet trusts.
		network = []string{"--bind-address=0.0.0.0", "--advertise-address=" + realNodeIP, "--kubelet-preferred-address-types=InternalIP",
			"--kubelet-client-certificate=" + c.pki.AdminCert, "--kubelet-client-key=" + c.pki.AdminKey}
	}
	extra = append(extra, network...)
	p, err := c.start("kube-apiserver", bin, append([]string{
		"--etcd-servers=" + etcdURL,
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--tls-cert-file=" + c.pki.ServingCert, "--tls-private-key-file=" + c.pki.ServingKey,
		"--client-ca-file=" + c.pki.CACert,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + c.pki.SAPub,
		"--service-account-signing-key-file=" + c.pki.SAKey,
		"--api-audiences=https://kubernetes.default.svc",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		// Nodes are created by the harness; the node lifecycle controller, which would lift
		// this admission plugin's not-ready taint, is not run.
		"--disable-admission-plugins=TaintNodesByCondition",
		// As in production clusters: a kubelet writes its own Node and pods only, and asks for
		// certificates (PodCertificateRequests) only for its own pods.
		"--enable-admission-plugins=NodeRestriction",
		"--enable-priority-and-fairness=false",
		// A namespace's deletion sends one DeleteCollection per resource, which deletes one object
		// at a time by default: with a benchmark's 10,000 Evaluators, several timed out at the
		// request timeout (60 s) and the namespace took several passes. A namespace of 5,000
		// ConfigMaps went in 12.6 s with one worker, 10.0 s with these.
		"--delete-collection-workers=8",
	}, extra...)...)
	if err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: c.pki.CACert, CertFile: c.pki.AdminCert, KeyFile: c.pki.AdminKey,
		},
		QPS: 200, Burst: 400,
	}
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		return err
	}
	if err := p.poll(ctx, 200*time.Millisecond, httpOK(hc, host+"/readyz")); err != nil {
		return err
	}
	return c.checkVersion()
}

// checkVersion asks the API server its version and refuses any but the supported minor: the
// binaries may come from KUBEBUILDER_ASSETS, which says nothing of what they are.
func (c *Cluster) checkVersion() error {
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return err
	}
	v, err := disc.ServerVersion()
	if err != nil {
		return fmt.Errorf("asking the API server its version: %w", err)
	}
	return supportedMinor(v)
}

// supportedMinor refuses a server version of any minor but evalsi.KubernetesMinor.
func supportedMinor(v *version.Info) error {
	if minor := evalsi.MinorOf(v); minor != evalsi.KubernetesMinor {
		return fmt.Errorf("the API server is Kubernetes %s (%s); the tests run on %s only", minor, v.GitVersion, evalsi.KubernetesMinor)
	}
	return nil
}
