package clustertest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"evals.si/operator/cluster"
)

// Kubelet plays the kubelet, which KWOK does not run, for chosen workloads whose image is the
// platform image: while a listed Deployment exists it runs one replica of it as a local process
// of Bin (the image's entrypoint), and stops it when the Deployment goes; a listed Job is run to
// its end once and its status written as the job controller would. A pod runs as its service
// account (a TokenRequest token in KUBECONFIG), with its environment, its Secret, ConfigMap,
// projected-token and emptyDir volumes written to a directory that replaces their mount paths
// in its arguments, its container ports moved to free loopback ports to which the Services
// selecting it are routed, and Services reached by DNS name through the cluster's service
// network. A Deployment's pod counts as started once its readiness probe passes.
type Kubelet struct {
	// Bin is the platform image's entrypoint, the operator binary.
	Bin string
	// Deployments and Jobs are "namespace/name" of the workloads to play.
	Deployments, Jobs []string

	c    *cluster.Cluster
	dir  string
	mu   sync.Mutex
	pods map[string]*Pod
	done map[string]bool // Jobs run
	errs []error
}

// Pod is a workload's pod played by a local process.
type Pod struct {
	// Log is the path of the process's output.
	Log string
	// Addrs are the loopback addresses of its container ports, by port name and number.
	Addrs map[string]string
	cmd   *exec.Cmd
	once  sync.Once
	done  chan struct{}
	err   error
}

// Stop interrupts the process and waits for it to end.
func (p *Pod) Stop() {
	p.once.Do(func() {
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// Start plays k's workloads on c until the test ends; the errors it met fail the test then.
func (k *Kubelet) Start(t testing.TB, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	k.c, k.dir = c, t.TempDir()
	k.pods, k.done = map[string]*Pod{}, map[string]bool{}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for ctx.Err() == nil {
			k.sync(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		k.mu.Lock()
		defer k.mu.Unlock()
		for name, p := range k.pods {
			p.Stop()
			if t.Failed() {
				out, _ := os.ReadFile(p.Log)
				t.Logf("log of the pod of %s:\n%s", name, out)
			}
		}
		for _, err := range k.errs {
			t.Error(err)
		}
	})
}

// Pod returns the running pod of the Deployment "namespace/name", or nil.
func (k *Kubelet) Pod(deployment string) *Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pods[deployment]
}

// Settle waits until every listed Deployment that exists has a ready pod, and every pod of a
// Deployment that is gone has stopped.
func (k *Kubelet) Settle(t testing.TB, ctx context.Context) {
	t.Helper()
	cs := k.c.Clientset()
	Eventually(t, ctx, "played pods settled", func() error {
		k.mu.Lock()
		errs := errors.Join(k.errs...)
		k.mu.Unlock()
		if errs != nil {
			t.Fatal(errs)
		}
		for _, key := range k.Deployments {
			ns, name, _ := strings.Cut(key, "/")
			d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			running := k.Pod(key) != nil
			exists := err == nil && d.DeletionTimestamp == nil
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if exists != running {
				return fmt.Errorf("Deployment %s exists=%v, pod running=%v", key, exists, running)
			}
		}
		return nil
	})
}

func (k *Kubelet) sync(ctx context.Context) {
	cs := k.c.Clientset()
	for _, key := range k.Deployments {
		ns, name, _ := strings.Cut(key, "/")
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		gone := apierrors.IsNotFound(err) || (err == nil && d.DeletionTimestamp != nil)
		k.mu.Lock()
		p := k.pods[key]
		k.mu.Unlock()
		switch {
		case gone && p != nil:
			p.Stop()
			k.mu.Lock()
			delete(k.pods, key)
			k.mu.Unlock()
		case err == nil && !gone && p == nil:
			p, err := k.startDeployment(ctx, d)
			k.mu.Lock()
			if err != nil && ctx.Err() == nil {
				k.errs = appendNew(k.errs, fmt.Errorf("playing the pod of Deployment %s: %w", key, err))
			}
			if p != nil {
				k.pods[key] = p
			}
			k.mu.Unlock()
		}
	}
	for _, key := range k.Jobs {
		if k.done[key] {
			continue
		}
		ns, name, _ := strings.Cut(key, "/")
		job, err := cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || job.DeletionTimestamp != nil {
			continue
		}
		k.done[key] = true
		if err := k.runJob(ctx, job); err != nil && ctx.Err() == nil {
			k.mu.Lock()
			k.errs = append(k.errs, fmt.Errorf("playing Job %s: %w", key, err))
			k.mu.Unlock()
		}
	}
}

// appendNew appends err to errs unless an error with its message is there already: a pod that
// fails to start is tried again on every pass.
func appendNew(errs []error, err error) []error {
	for _, e := range errs {
		if e.Error() == err.Error() {
			return errs
		}
	}
	return append(errs, err)
}

// startDeployment starts one pod of d and waits for its readiness probe.
func (k *Kubelet) startDeployment(ctx context.Context, d *appsv1.Deployment) (*Pod, error) {
	p, local, err := k.start(ctx, d.Namespace, d.Name, d.Spec.Template.Spec)
	if err != nil {
		return nil, err
	}
	if err := k.routeServices(ctx, d.Namespace, d.Spec.Template.Labels, local); err != nil {
		p.Stop()
		return nil, err
	}
	if probe := d.Spec.Template.Spec.Containers[0].ReadinessProbe; probe != nil && probe.HTTPGet != nil {
		if err := waitReady(ctx, p, probe.HTTPGet, local); err != nil {
			p.Stop()
			return nil, err
		}
	}
	return p, nil
}

// runJob runs the Job's pod to its end and records the outcome in the Job's status.
func (k *Kubelet) runJob(ctx context.Context, job *batchv1.Job) error {
	p, _, err := k.start(ctx, job.Namespace, job.Name, job.Spec.Template.Spec)
	if err != nil {
		return err
	}
	<-p.done
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now}
	if p.err != nil {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "PodFailed"},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "PodFailed"},
		}
	} else {
		job.Status.Succeeded, job.Status.CompletionTime = 1, &now
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	}
	if _, err := k.c.Clientset().BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the Job's status: %w", err)
	}
	if p.err != nil {
		out, _ := os.ReadFile(p.Log)
		return fmt.Errorf("the pod failed: %v\n%s", p.err, out)
	}
	return nil
}

// start runs the first container of spec as a local process; it returns the pod and the loopback
// address of each container port, by number and by name.
func (k *Kubelet) start(ctx context.Context, namespace, owner string, spec corev1.PodSpec) (*Pod, map[string]string, error) {
	ctr := spec.Containers[0]
	root, err := os.MkdirTemp(k.dir, owner+"-")
	if err != nil {
		return nil, nil, err
	}
	podName := filepath.Base(root)

	// Volumes, longest mount path first so that nested mounts are replaced before their parents.
	mounts := append([]corev1.VolumeMount(nil), ctr.VolumeMounts...)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].MountPath) > len(mounts[j].MountPath) })
	var pathSwaps []string
	for i, m := range mounts {
		dir := filepath.Join(root, "volumes", strconv.Itoa(i))
		if err := k.writeVolume(ctx, namespace, spec, m.Name, dir); err != nil {
			return nil, nil, err
		}
		pathSwaps = append(pathSwaps, m.MountPath, dir)
	}
	paths := strings.NewReplacer(pathSwaps...)

	local := map[string]string{}
	var portSwaps []string
	for _, p := range ctr.Ports {
		addr, err := freeAddr()
		if err != nil {
			return nil, nil, err
		}
		n := strconv.Itoa(int(p.ContainerPort))
		local[n] = addr
		if p.Name != "" {
			local[p.Name] = addr
		}
		portSwaps = append(portSwaps, "=:"+n, "="+addr, "=0.0.0.0:"+n, "="+addr)
	}
	ports := strings.NewReplacer(portSwaps...)
	args := make([]string, len(ctr.Args))
	for i, a := range ctr.Args {
		args[i] = ports.Replace(paths.Replace(a))
	}

	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = "default"
	}
	env := append(os.Environ(), k.c.ProxyEnv()...)
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		_, kubeconfig, err := tokenKubeconfig(ctx, k.c, root, namespace, spec.ServiceAccountName)
		if err != nil {
			return nil, nil, err
		}
		env = append(env, "KUBECONFIG="+kubeconfig)
	}
	for _, e := range ctr.Env {
		v, err := k.envValue(ctx, namespace, podName, e)
		if err != nil {
			return nil, nil, err
		}
		env = append(env, e.Name+"="+paths.Replace(v))
	}

	logPath := filepath.Join(root, "log")
	logs, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(k.Bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logs, logs
	if err := cmd.Start(); err != nil {
		logs.Close()
		return nil, nil, fmt.Errorf("starting %v: %w", args, err)
	}
	p := &Pod{Log: logPath, Addrs: local, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logs.Close()
		close(p.done)
	}()
	return p, local, nil
}

// probeClient is the kubelet's: it does not verify a probe's HTTPS certificate.
var probeClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// waitReady polls the readiness probe until it answers 200, for at most a minute.
func waitReady(ctx context.Context, p *Pod, probe *corev1.HTTPGetAction, local map[string]string) error {
	addr, ok := local[probe.Port.String()]
	if !ok {
		return fmt.Errorf("the readiness probe's port %s is not a container port", probe.Port.String())
	}
	scheme := "http"
	if probe.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+probe.Path, nil)
		resp, err := probeClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		select {
		case <-p.done:
			out, _ := os.ReadFile(p.Log)
			return fmt.Errorf("the pod ended before it was ready: %v\n%s", p.err, out)
		case <-ctx.Done():
			return fmt.Errorf("not ready within a minute: %v", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// routeServices routes every port of the Services in namespace that select podLabels to the
// loopback address of its target port.
func (k *Kubelet) routeServices(ctx context.Context, namespace string, podLabels, local map[string]string) error {
	svcs, err := k.c.Clientset().CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, s := range svcs.Items {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(podLabels)) {
			continue
		}
		for _, p := range s.Spec.Ports {
			target := p.TargetPort
			if target == (intstr.IntOrString{}) {
				target = intstr.FromInt32(p.Port)
			}
			if addr, ok := local[target.String()]; ok {
				if err := k.c.ServeService(ctx, namespace, s.Name, int(p.Port), addr); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// freeAddr returns a free loopback address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
