package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/operator/internal/podproc"
)

// initContainerTimeout bounds one played init container.
const initContainerTimeout = time.Minute

// maxTerminationMessage is the most of a termination message the kubelet keeps.
const maxTerminationMessage = 4096

// RunInitContainers plays the start of pod as the kubelet does it, on this machine's kernel: each
// init container in order, as a local process of Bin (the platform image's entrypoint) confined
// as its security context asks (its user and group, no_new_privs for allowPrivilegeEscalation:
// false, a seccomp filter for a profile other than Unconfined, a user namespace of its own for
// hostUsers: false), until one fails; and it writes each one's end into the pod's status as the
// kubelet does, with its exit code and its termination message. An emptyDir mount is a
// directory of its own (a mount at /tmp is given as TMPDIR); the termination message file is
// given as --termination-log, the flag the platform image's commands that write one take;
// extraArgs are added to every init container's (what a test says of the node: --without=,
// --reach=). The environment is the container's own values alone: the test has no pod network,
// so the Kubernetes service variables are not set. Start must have been called.
func (k *Kubelet) RunInitContainers(t testing.TB, ctx context.Context, pod *corev1.Pod, extraArgs ...string) error {
	t.Helper()
	root, err := os.MkdirTemp("", "evalsi-pod-")
	if err != nil {
		return err
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// Another user than root must enter the directory and run the binary (go's own build
	// directory and t.TempDir are root's alone).
	if err := os.Chmod(root, 0o755); err != nil {
		return err
	}
	bin, err := podproc.CopyExecutable(k.Bin, root, "entrypoint")
	if err != nil {
		return fmt.Errorf("copying the entrypoint: %w", err)
	}
	var statuses []corev1.ContainerStatus
	for i, ctr := range pod.Spec.InitContainers {
		dir := filepath.Join(root, fmt.Sprintf("init-%d", i))
		status, err := k.runInit(ctx, pod, ctr, bin, dir, extraArgs)
		if err != nil {
			return fmt.Errorf("init container %s: %w", ctr.Name, err)
		}
		statuses = append(statuses, status)
		if status.State.Terminated.ExitCode != 0 {
			break
		}
	}
	pods := k.c.Clientset().CoreV1().Pods(pod.Namespace)
	var last error
	for range 10 { // bounded: a conflict means another writer, retried on the fresh pod
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.InitContainerStatuses = statuses
		if _, last = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); last == nil {
			return nil
		}
	}
	return fmt.Errorf("writing the status of pod %s/%s: %w", pod.Namespace, pod.Name, last)
}

// runInit runs one init container in dir and returns its status as the kubelet writes it.
func (k *Kubelet) runInit(ctx context.Context, pod *corev1.Pod, ctr corev1.Container, bin, dir string, extraArgs []string) (corev1.ContainerStatus, error) {
	confined, err := confinementOf(pod.Spec, ctr)
	if err != nil {
		return corev1.ContainerStatus{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return corev1.ContainerStatus{}, err
	}
	env := []string{"PATH=/usr/bin:/bin"}
	var swaps []string
	for i, m := range ctr.VolumeMounts {
		if !isEmptyDir(pod.Spec, m.Name) {
			return corev1.ContainerStatus{}, fmt.Errorf("volume %s: only emptyDir volumes are played for init containers", m.Name)
		}
		path := filepath.Join(dir, fmt.Sprintf("volume-%d", i))
		if err := os.Mkdir(path, 0o777); err != nil {
			return corev1.ContainerStatus{}, err
		}
		if err := os.Chmod(path, 0o777); err != nil { // past the umask: the container's user writes it
			return corev1.ContainerStatus{}, err
		}
		swaps = append(swaps, m.MountPath, path)
		if m.MountPath == "/tmp" {
			env = append(env, "TMPDIR="+path)
		}
	}
	paths := strings.NewReplacer(swaps...)
	for _, e := range ctr.Env {
		v, err := k.envValue(ctx, pod.Namespace, pod.Name, e)
		if err != nil {
			return corev1.ContainerStatus{}, err
		}
		env = append(env, e.Name+"="+paths.Replace(v))
	}
	message := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(message, nil, 0o666); err != nil {
		return corev1.ContainerStatus{}, err
	}
	if err := os.Chmod(message, 0o666); err != nil {
		return corev1.ContainerStatus{}, err
	}
	var args []string
	if len(ctr.Command) > 1 { // the first word is the image's entrypoint, which Bin plays
		args = append(args, ctr.Command[1:]...)
	}
	args = append(args, ctr.Args...)
	for i, a := range args {
		args[i] = paths.Replace(a)
	}
	args = append(args, extraArgs...)
	args = append(args, "--termination-log="+message)

	ctx, cancel := context.WithTimeout(ctx, initContainerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	logs, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return corev1.ContainerStatus{}, err
	}
	defer logs.Close()
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, logs, logs
	code := int32(0)
	if err := confined.Run(cmd); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return corev1.ContainerStatus{}, fmt.Errorf("running %v: %w", args, err)
		}
		code = int32(exit.ExitCode())
	}
	msg, err := os.ReadFile(message)
	if err != nil {
		return corev1.ContainerStatus{}, err
	}
	if len(msg) > maxTerminationMessage {
		msg = msg[:maxTerminationMessage]
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	return corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: string(msg), FinishedAt: metav1.Now(),
	}}}, nil
}

// confinementOf is what the runtime does for ctr of spec: the container's security context
// over the pod's, as the kubelet merges them.
func confinementOf(spec corev1.PodSpec, ctr corev1.Container) (podproc.Confinement, error) {
	pod := spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	sc := ctr.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	uid, gid := first(sc.RunAsUser, pod.RunAsUser), first(sc.RunAsGroup, pod.RunAsGroup)
	if gid == 0 {
		gid = uid
	}
	nonRoot := sc.RunAsNonRoot != nil && *sc.RunAsNonRoot || sc.RunAsNonRoot == nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot
	if nonRoot && uid == 0 {
		return podproc.Confinement{}, errors.New("runAsNonRoot without a runAsUser other than 0: the kubelet refuses to start it")
	}
	if sc.Privileged != nil && *sc.Privileged {
		return podproc.Confinement{UID: uint32(uid), GID: uint32(gid)}, nil
	}
	profile := sc.SeccompProfile
	if profile == nil {
		profile = pod.SeccompProfile
	}
	return podproc.Confinement{
		UID: uint32(uid), GID: uint32(gid),
		NoNewPrivs:    sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		Seccomp:       profile != nil && profile.Type != corev1.SeccompProfileTypeUnconfined,
		UserNamespace: spec.HostUsers != nil && !*spec.HostUsers,
	}, nil
}

// first is the first of values that is set, else 0.
func first(values ...*int64) int64 {
	for _, v := range values {
		if v != nil {
			return *v
		}
	}
	return 0
}

// isEmptyDir reports whether spec's volume name is an emptyDir.
func isEmptyDir(spec corev1.PodSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v.EmptyDir != nil
		}
	}
	return false
}
