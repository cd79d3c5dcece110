// Package cluster runs a real Kubernetes control plane on loopback for tests and `make dev`: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler built from the Go module proxy, and
// KWOK simulating nodes and pods.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options configure a control plane.
type Options struct {
	// Nodes is the number of KWOK nodes; 1 when zero, unless RealNode.
	Nodes int
	// RealNode adds a node whose kubelet runs pods in containers, with kube-proxy, cluster DNS
	// and NetworkPolicy enforcement (Cluster.Node), inside the namespaces of a test binary run by
	// IsolatedMain; KWOK nodes are then only those Nodes asks for.
	RealNode bool
	// NodeCapacity is each node's capacity and allocatable, by resource name; defaults give
	// 64 CPUs, 256Gi memory and 1000 pods. Add "nvidia.com/gpu" for GPU nodes.
	NodeCapacity map[string]string
	// NodeTaints are each KWOK node's taints.
	NodeTaints []corev1.Taint
	// CRDDirs are directories (or files) of CRDs installed before Start returns.
	CRDDirs []string
	// Progress receives one line per binary built and per component started; nil discards.
	Progress io.Writer
	// Dir holds the data and logs; a new temporary directory when empty, removed by Stop.
	Dir string
	// AuditPolicy, when set, is an audit policy (YAML) the API server logs requests by, as JSON
	// lines in AuditLog (benchmarks count what a client wrote from it).
	AuditPolicy string
	// FeatureGates are the API server's --feature-gates, each "Name=true" or "Name=false".
	FeatureGates []string
	// WithoutKubectl leaves kubectl unbuilt, for a caller that runs none (make dev).
	WithoutKubectl bool
	// WithoutReplicaSets leaves the ReplicaSet controller out of the controller-manager: a
	// Deployment gets its ReplicaSet, which never asks for a pod. For benchmarks that measure
	// controllers without pods; refusing the pods instead makes the controller retry each
	// ReplicaSet's creates forever, which took half a core beside what was measured.
	WithoutReplicaSets bool
}

// Cluster is a running control plane.
type Cluster struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for the admin identity.
	Kubeconfig string
	// Dir holds data directories, certificates and component logs.
	Dir string
	// Kubectl is the path of kubectl, built from the same Kubernetes version ("" with
	// Options.WithoutKubectl).
	Kubectl string
	// AuditLog is the API server's audit log when Options.AuditPolicy is set, else "".
	AuditLog string
	// Node is the real node (Options.RealNode), else nil.
	Node *RealNode

	pki certFiles
	net *serviceNetwork
	// procsMu guards procs, which a supervised component's restart changes (superviseKwok), and
	// stopping, set once Stop begins.
	procsMu   sync.Mutex
	procs     []*process
	stopping  bool
	ownsDir   bool
	nodeCount int
	opts      Options
}

// Start builds (first run only) and starts a control plane on free loopback ports. On error,
// everything already started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Nodes == 0 && !opts.RealNode {
		opts.Nodes = 1
	}
	assets, err := EnsureAssets(ctx, opts.Progress, !opts.WithoutKubectl)
	if err != nil {
		return nil, err
	}
	var node *RealNode
	if opts.RealNode {
		if node, err = newRealNode(ctx, opts.Progress); err != nil {
			return nil, err
		}
	}
	c := &Cluster{Dir: opts.Dir, Kubectl: assets.Kubectl, opts: opts}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "evalsi-cluster-"); err != nil {
			return nil, err
		}
		c.ownsDir = true
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.pki, err = writePKI(c.Dir); err != nil {
		return nil, fmt.Errorf("writing certificates: %w", err)
	}
	if c.net, err = startServiceNetwork(c.Dir); err != nil {
		return nil, err
	}
	if node != nil {
		// Before the API server, which advertises the node's address to pods.
		c.Node = node
		if err := node.network(c.Dir); err != nil {
			return nil, err
		}
	}
	etcdURL, err := c.startEtcd(ctx, assets.Etcd)
	if err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx, assets.KubeAPIServer, etcdURL); err != nil {
		return nil, err
	}
	if err := c.startControllers(assets); err != nil {
		return nil, err
	}
	if err := c.startKwok(assets); err != nil {
		return nil, err
	}
	if err := c.addNodes(ctx, opts.Nodes, opts.NodeCapacity, opts.NodeTaints); err != nil {
		return nil, err
	}
	if node != nil {
		if err := c.startRealNode(ctx); err != nil {
			return nil, err
		}
	}
	for _, d := range opts.CRDDirs {
		if err := c.InstallCRDs(ctx, d); err != nil {
			return nil, err
		}
	}
	if err := c.waitDefaultServiceAccount(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Stop ends every process the cluster started and removes its directory when Start created it.
func (c *Cluster) Stop() {
	if c.Node != nil {
		c.Node.stop()
		c.Node = nil
	}
	c.procsMu.Lock()
	procs := c.procs
	c.procs, c.stopping = nil, true
	c.procsMu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(10 * time.Second)
	}
	if c.net != nil {
		c.net.stop()
	}
	if c.ownsDir {
		os.RemoveAll(c.Dir)
	}
}

// Attach returns the cluster that the kubeconfig file (the default loading rules when empty)
// names in kubeContext (its current one when empty), without starting anything: for make dev against
// an existing cluster. Stop then only removes the working directory.
func Attach(kubeconfig, kubeContext string) (*Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	dir, err := os.MkdirTemp("", "evalsi-dev-")
	if err != nil {
		return nil, err
	}
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, err
	}
	if kubeContext != "" {
		raw.CurrentContext = kubeContext
	}
	c := &Cluster{Config: cfg, Dir: dir, ownsDir: true, Kubeconfig: filepath.Join(dir, "kubeconfig")}
	// A copy with the context chosen, for the hint make dev prints.
	if err := clientcmd.WriteToFile(raw, c.Kubeconfig); err != nil {
		return nil, err
	}
	return c, nil
}

// poll calls check every interval until it returns nil or ctx ends; while this cluster's own
// kube-apiserver runs, also until that process exits.
func (c *Cluster) poll(ctx context.Context, interval time.Duration, check func(context.Context) error) error {
	if p := c.process("kube-apiserver"); p != nil {
		return p.poll(ctx, interval, check)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		return check(ctx) == nil, nil
	})
}

// WebhookClientCA is the path of the CA that verifies the client certificate the API server
// presents to every admission webhook (common name WebhookClientName).
func (c *Cluster) WebhookClientCA() string { return c.pki.WebhookClientCA }

// ServiceAccountSigningKey is the path of the key the API server signs service-account tokens
// with (PEM), for tests that forge tokens the cluster could have issued.
func (c *Cluster) ServiceAccountSigningKey() string { return c.pki.SAKey }

// PIDs returns the process ids of the running components.
func (c *Cluster) PIDs() []int {
	var pids []int
	c.procsMu.Lock()
	defer c.procsMu.Unlock()
	for _, p := range c.procs {
		if !p.exited() {
			pids = append(pids, p.cmd.Process.Pid)
		}
	}
	return pids
}

// Dynamic returns a dynamic client with the admin identity.
func (c *Cluster) Dynamic() *dynamic.DynamicClient {
	return dynamic.NewForConfigOrDie(c.Config)
}

// Clientset returns a typed client with the admin identity, for test set-up.
func (c *Cluster) Clientset() *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(c.Config)
}

func (c *Cluster) startEtcd(ctx context.Context, bin string) (string, error) {
	ports, err := freePortList(2)
	if err != nil {
		return "", err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	p, err := c.start("etcd", bin,
		"--name=default",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return "", err
	}
	return clientURL, p.poll(ctx, 100*time.Millisecond, httpOK(http.DefaultClient, clientURL+"/health"))
}

func (c *Cluster) startControllers(a Assets) error {
	ports, err := freePortList(2)
	if err != nil {
		return err
	}
	controllers := "garbagecollector,deployment,replicaset,namespace,clusterrole-aggregation,serviceaccount"
	if c.opts.WithoutReplicaSets {
		controllers = strings.Replace(controllers, ",replicaset", "", 1)
	}
	if c.Node != nil {
		// kube-proxy routes a Service to the addresses of its EndpointSlices; a claim binds to
		// a volume of the node; pods' projected tokens come with the cluster's CA; Jobs (Helm's hooks) run.
		controllers += ",endpointslice,persistentvolume-binder,root-ca-cert-publisher,job"
	}
	_, err = c.start("kube-controller-manager", a.KubeControllerManager,
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[0]),
		"--leader-elect=false",
		"--controllers="+controllers,
		"--concurrent-gc-syncs=5",
		// At its default of 20 requests a second, rolling out many Deployments (a benchmark's
		// thousands of pools) is paced by the controller-manager, not by what is measured.
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--root-ca-file="+c.pki.CACert,
	)
	if err != nil {
		return err
	}
	_, err = c.start("kube-scheduler", a.KubeScheduler,
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[1]),
		"--leader-elect=false",
	)
	return err
}

func (c *Cluster) startKwok(a Assets) error {
	ports, err := freePortList(1)
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokAnnotation + "=fake",
		"--node-ip=127.0.0.1",
		"--cidr=10.244.0.0/16",
		"--server-address=127.0.0.1:" + strconv.Itoa(ports[0]),
	}
	for _, s := range a.KwokStages {
		args = append(args, "--config="+s)
	}
	p, err := c.start("kwok", a.Kwok, args...)
	if err == nil {
		go c.superviseKwok(p)
	}
	return err
}

// kwokRestarts bounds how often superviseKwok starts KWOK again.
const kwokRestarts = 5

// superviseKwok starts KWOK again when it exits while the cluster runs: v0.8.0 can crash at a
// stage's first match (a concurrent map write in its CEL type registry, which took down a fresh
// clone's control plane for a whole package), and it keeps no state of its own, so a new one
// carries on from the API server. The crash stays in kwok.log.previous.
func (c *Cluster) superviseKwok(p *process) {
	for range kwokRestarts {
		<-p.done
		c.procsMu.Lock()
		if c.stopping {
			c.procsMu.Unlock()
			return
		}
		n, err := p.restart()
		if err == nil {
			for i := range c.procs {
				if c.procs[i] == p {
					c.procs[i] = n
				}
			}
		}
		c.procsMu.Unlock()
		if err != nil {
			return
		}
		fmt.Fprintf(c.opts.Progress, "kwok exited (%v): started again\n", p.err)
		p = n
	}
}

func (c *Cluster) start(name, bin string, args ...string) (*process, error) {
	return c.startEnv(name, bin, nil, args...)
}

// startEnv starts a component with env added to the environment.
func (c *Cluster) startEnv(name, bin string, env []string, args ...string) (*process, error) {
	fmt.Fprintf(c.opts.Progress, "starting %s\n", name)
	p, err := startProcess(c.Dir, name, bin, env, args...)
	if err != nil {
		return nil, err
	}
	c.procsMu.Lock()
	c.procs = append(c.procs, p)
	c.procsMu.Unlock()
	return p, nil
}

// process returns the running component called name.
func (c *Cluster) process(name string) *process {
	c.procsMu.Lock()
	defer c.procsMu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

func (c *Cluster) writeKubeconfig() error {
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	return writeKubeconfigFile(c.Kubeconfig, c.Config.Host, c.pki.CACert, "admin", c.pki.AdminCert, c.pki.AdminKey)
}

// writeKubeconfigFile writes a kubeconfig at path for the API server at server, whose CA is
// caFile, signing in as user with a client certificate.
func writeKubeconfigFile(path, server, caFile, user, certFile, keyFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["evalsi"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["evalsi"] = &clientcmdapi.Context{Cluster: "evalsi", AuthInfo: user}
	cfg.CurrentContext = "evalsi"
	return clientcmd.WriteToFile(*cfg, path)
}

// waitDefaultServiceAccount waits until the service-account controller has made the default
// namespace's ServiceAccount, without which pods are not admitted.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	cs := c.Clientset()
	return c.process("kube-controller-manager").poll(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", getOpts)
		return err
	})
}

// httpOK returns a check that url answers 200.
func httpOK(hc *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
}

// freePortList returns n distinct free loopback ports, held open until all are chosen.
func freePortList(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("finding a free port"), err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
