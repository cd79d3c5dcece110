package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serviceNetwork plays kube-proxy and cluster DNS for processes that stand in for pods: an HTTP
// proxy on loopback that connects a Service's ClusterIP or DNS name and port to the loopback
// address where the process serving it listens. The API server reaches Services through it
// (its "cluster" egress: webhooks and aggregated APIs by Service reference), and so do the
// processes a test starts with ProxyEnv (HTTP_PROXY and HTTPS_PROXY; loopback stays direct).
// A Service without a route refuses the connection, as one whose pods do not serve.
type serviceNetwork struct {
	listener net.Listener // loopback TCP, for processes
	socket   string       // a Unix socket, for the API server's egress
	server   *http.Server

	mu     sync.Mutex
	routes map[string]string // "ClusterIP:port" and "name.namespace.svc:port" -> loopback address
}

func startServiceNetwork(dir string) (*serviceNetwork, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the service network: %w", err)
	}
	// The API server's HTTPConnect egress over TCP requires TLS with a client certificate; over a
	// Unix socket it needs neither.
	socket := filepath.Join(dir, "services.sock")
	ul, err := net.Listen("unix", socket)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("listening for the service network: %w", err)
	}
	n := &serviceNetwork{listener: l, socket: socket, routes: map[string]string{}}
	forward := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.Out.URL = r.In.URL },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return n.dial(ctx, addr) }},
	}
	n.server = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			forward.ServeHTTP(w, r) // a plain http:// request sent to a proxy
			return
		}
		n.tunnel(w, r)
	})}
	go n.server.Serve(l)
	go n.server.Serve(ul)
	return n, nil
}

// URL is the proxy's address, for the API server's egress configuration and ProxyEnv.
func (n *serviceNetwork) URL() string { return "http://" + n.listener.Addr().String() }

func (n *serviceNetwork) stop() { n.server.Close() }

// dial connects to the process serving addr, a Service address.
func (n *serviceNetwork) dial(ctx context.Context, addr string) (net.Conn, error) {
	n.mu.Lock()
	backend, ok := n.routes[strings.TrimSuffix(addr, ".cluster.local")]
	if !ok {
		host, port, _ := net.SplitHostPort(addr)
		backend, ok = n.routes[net.JoinHostPort(strings.TrimSuffix(host, ".cluster.local"), port)]
	}
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no process serves %s", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", backend)
}

// tunnel answers a CONNECT with a byte stream to the process serving its address.
func (n *serviceNetwork) tunnel(w http.ResponseWriter, r *http.Request) {
	upstream, err := n.dial(r.Context(), r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		upstream.Close()
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	go func() {
		io.Copy(upstream, buf)
		upstream.Close()
	}()
	io.Copy(client, upstream)
	client.Close()
}

// writeEgressConfig writes the API server's egress selector configuration that sends its traffic
// to the cluster network through the proxy.
func (n *serviceNetwork) writeEgressConfig(dir string) (string, error) {
	path := filepath.Join(dir, "egress-selector.yaml")
	cfg := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
  - name: cluster
    connection:
      proxyProtocol: HTTPConnect
      transport:
        uds:
          udsName: %s
`, n.socket)
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

// ServeService routes the Service namespace/name's port to addr, a loopback address where a
// process stands in for the Service's pods: through the service network the API server and
// the processes started with ProxyEnv reach it by ClusterIP and by DNS name.
func (c *Cluster) ServeService(ctx context.Context, namespace, name string, port int, addr string) error {
	svc, err := c.Clientset().CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("routing Service %s/%s: %w", namespace, name, err)
	}
	p := strconv.Itoa(port)
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	for _, host := range []string{svc.Spec.ClusterIP, name + "." + namespace + ".svc", name + "." + namespace} {
		if host != "" && host != "None" {
			c.net.routes[net.JoinHostPort(host, p)] = addr
		}
	}
	return nil
}

// ProxyEnv is the environment that makes a process reach Services through the service network,
// by DNS name, as a pod would; loopback addresses, the API server's among them, stay direct.
func (c *Cluster) ProxyEnv() []string {
	return []string{"HTTP_PROXY=" + c.net.URL(), "HTTPS_PROXY=" + c.net.URL(), "NO_PROXY=127.0.0.1,localhost"}
}
