// Package podproc runs a local process as a container runtime runs a pod's container, for tests
// that play the kubelet on this machine's own kernel: as the container's user, with
// no_new_privs and a seccomp filter when its security context asks for them, in a user namespace
// of its own for hostUsers: false, and with addresses that drop every connection as a
// NetworkPolicy drops them. It needs root, as CI and this machine run.
package podproc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Confinement is what a container's security context asks of its process.
type Confinement struct {
	// UID and GID the process runs as; a user other than root holds no capability.
	UID, GID uint32
	// NoNewPrivs is allowPrivilegeEscalation: false.
	NoNewPrivs bool
	// Seccomp is a seccomp profile other than Unconfined. The filter installed allows every call:
	// the runtime's default profile is not reproduced, the mode is what a probe reads.
	Seccomp bool
	// UserNamespace is hostUsers: false: the process runs in a user namespace of its own that
	// maps 65,536 ids of the node's, from 100000, as the kubelet maps a pod's.
	UserNamespace bool
}

// Run starts cmd confined as c says and waits for it to end; its error is cmd.Run's.
func (c Confinement) Run(cmd *exec.Cmd) error {
	if os.Getuid() != 0 {
		return errors.New("confining a process as another user needs root")
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID}
	if c.UserNamespace {
		idMap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 100000, Size: 65536}}
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = idMap, idMap
	}
	start := make(chan error, 1)
	starter(c.NoNewPrivs, c.Seccomp) <- func(confined error) {
		if confined != nil {
			start <- fmt.Errorf("confining the thread that starts the process: %w", confined)
			return
		}
		start <- cmd.Start()
	}
	if err := <-start; err != nil {
		return err
	}
	return cmd.Wait()
}

// starters are the threads that start confined processes, one for each confinement of the
// thread (no_new_privs, seccomp), each kept for the life of this process: a child inherits both
// from the thread that forks it, and neither can be undone on a thread, so a confined thread is
// never given back to the runtime. Nor may it end: a thread that ends kills every process it
// started with a parent-death signal (the test control plane's are started so), and the thread
// may have been the one that started them before it was confined.
var starters struct {
	mu      sync.Mutex
	threads map[[2]bool]chan func(confined error)
}

// starter returns the thread, started on first use, that runs what it is sent confined so; what
// it runs is told whether the thread could be confined.
func starter(noNewPrivs, seccomp bool) chan<- func(confined error) {
	starters.mu.Lock()
	defer starters.mu.Unlock()
	key := [2]bool{noNewPrivs, seccomp}
	if ch, ok := starters.threads[key]; ok {
		return ch
	}
	if starters.threads == nil {
		starters.threads = map[[2]bool]chan func(error){}
	}
	ch := make(chan func(error))
	starters.threads[key] = ch
	go func() {
		runtime.LockOSThread() // never unlocked, and the goroutine never returns
		err := Confinement{NoNewPrivs: noNewPrivs, Seccomp: seccomp}.confineThread()
		for f := range ch {
			f(err)
		}
	}()
	return ch
}

// confineThread sets no_new_privs and an allow-all seccomp filter on the calling thread, as c asks.
func (c Confinement) confineThread() error {
	if c.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return err
		}
	}
	if !c.Seccomp {
		return nil
	}
	allow := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	prog := unix.SockFprog{Len: uint16(len(allow)), Filter: &allow[0]}
	if _, _, errno := unix.Syscall(unix.SYS_PRCTL, unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return errno
	}
	return nil
}

// SilentAddress returns a loopback address that accepts no connection and refuses none, as an
// address a NetworkPolicy drops: a listener with a socket filter that drops every packet sent to
// it, so that a SYN gets no answer and a dial times out, with no accept queue to fill. stop ends it.
func SilentAddress() (addr string, stop func(), err error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	stop = func() { unix.Close(fd) }
	drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &drop[0]}); err != nil {
		stop()
		return "", nil, fmt.Errorf("a socket filter that drops everything: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		stop()
		return "", nil, err
	}
	if err := unix.Listen(fd, 16); err != nil {
		stop()
		return "", nil, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		stop()
		return "", nil, err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port)), stop, nil
}

// CopyExecutable copies the program at from into dir as name, executable by any user: a confined
// process runs as another user than root, who may not enter go's build directories or a test's
// temporary one (dir must be open to it). It returns the copy's path.
func CopyExecutable(from, dir, name string) (string, error) {
	in, err := os.Open(from)
	if err != nil {
		return "", err
	}
	defer in.Close()
	to := filepath.Join(dir, name)
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", err
	}
	return to, out.Close()
}
