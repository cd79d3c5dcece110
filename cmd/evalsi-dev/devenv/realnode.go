package devenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"evals.si/operator/cluster"
)

// RealNode runs a session's pods in containers: a node with a kubelet, containerd and runc, in
// namespaces of the session's own (cluster.RunIsolated), beside a KWOK node for what this machine
// cannot hold.
type RealNode struct {
	// Host is a listener on the host's loopback, opened outside the namespaces: the session
	// forwards it to the API server, so that kubectl in another shell reaches the cluster.
	Host net.Listener
	// Dir is a directory outside the namespaces, for the kubeconfig that reaches the cluster
	// through Host and the operator's log.
	Dir string
}

// simulatedTaint keeps pods off the KWOK node while the real node holds them: the scheduler
// places a pod there only when no real node can take it (a GPU, or more CPU than this machine
// has), where it is simulated.
var simulatedTaint = corev1.Taint{Key: "evals.si/dev-simulated", Effect: corev1.TaintEffectPreferNoSchedule}

// forwardToAPIServer copies each connection accepted on l to the API server at server (a URL),
// both ways, until ctx ends.
func forwardToAPIServer(ctx context.Context, l net.Listener, server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		in, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer in.Close()
			var d net.Dialer
			out, err := d.DialContext(ctx, "tcp", u.Host)
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			for _, p := range [][2]net.Conn{{out, in}, {in, out}} {
				go func() { io.Copy(p[0], p[1]); done <- struct{}{} }()
			}
			select {
			case <-done:
			case <-ctx.Done():
			}
		}()
	}
}

// writeHostKubeconfig writes to dir a kubeconfig of the cluster's admin whose server is the host's
// end of the forward (addr), with the certificates in it: the files of the session's own
// kubeconfig are inside its mount namespace, out of the host's sight.
func writeHostKubeconfig(c *cluster.Cluster, dir string, addr net.Addr) (string, error) {
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return "", err
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return "", err
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + addr.String()
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// podTable is a table of the pods of the examples' namespaces: where each runs, how it is, and
// for one not ready, the last warning about it (a sandbox the runtime could not create, an image
// it could not pull), which kubectl shows only in describe.
func podTable(ctx context.Context, c *cluster.Cluster, namespaces []string) (string, error) {
	var pods []corev1.Pod
	warnings := map[types.UID]corev1.Event{}
	for _, ns := range namespaces {
		list, err := c.Clientset().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		pods = append(pods, list.Items...)
		events, err := c.Clientset().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,type=Warning"})
		if err != nil {
			return "", err
		}
		for _, e := range events.Items {
			if last, ok := warnings[e.InvolvedObject.UID]; !ok || eventTime(e).After(eventTime(last)) {
				warnings[e.InvolvedObject.UID] = e
			}
		}
	}
	sort.Slice(pods, func(i, j int) bool {
		return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name
	})
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tNAMESPACE\tNODE\tSTATUS\tLAST WARNING")
	for _, p := range pods {
		warning := ""
		if e, ok := warnings[p.UID]; ok && !podReady(p) {
			warning = e.Reason + ": " + tail(e.Message, 100)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Namespace, p.Spec.NodeName, podStatus(p), warning)
	}
	w.Flush()
	return b.String(), nil
}

// podStatus says how a pod is, as kubectl's STATUS column does in short: a container's waiting or
// terminated reason when it has one, else the phase, with how many containers are ready.
func podStatus(p corev1.Pod) string {
	ready := 0
	for _, s := range p.Status.ContainerStatuses {
		if s.Ready {
			ready++
		}
		switch {
		case s.State.Waiting != nil && s.State.Waiting.Reason != "":
			return s.State.Waiting.Reason
		case s.State.Terminated != nil && s.State.Terminated.Reason != "" && p.Status.Phase == corev1.PodRunning:
			return s.State.Terminated.Reason
		}
	}
	return fmt.Sprintf("%s %d/%d ready", p.Status.Phase, ready, len(p.Spec.Containers))
}

// podReady reports whether p's Ready condition is True.
func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// eventTime is when e last happened.
func eventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}

// tail is the last n bytes of s (its cause, in a runtime's chain of errors), marked as cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return "…" + s[cut:]
}
