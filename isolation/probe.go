// Package isolation finds out what confines the process it runs in, on the kernel it runs on:
// Landlock (and whether it really restricts a path), user namespaces (the pod's own, and whether
// a nested one maps root), the seccomp mode, no_new_privs, the effective capabilities, a
// read-only root file system, and which addresses the network reaches. Every sandbox pool pod
// runs it first (evalsi-operator probe, an init container with the pool's own security
// context), writes the Report to its termination message, and fails when the class's floor is
// not met; the operator reads the reports into the SandboxClass's status.
package isolation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Report is what the probe found. It is small enough for a termination message (4 KiB).
type Report struct {
	// Landlock is the Landlock ABI the kernel offers (0: none), and whether a ruleset really
	// kept a path from being read.
	LandlockABI       int  `json:"landlockABI"`
	LandlockRestricts bool `json:"landlockRestricts"`
	// PodUserNamespace says the process runs in a user namespace of its own (hostUsers: false):
	// its uid 0 is not the node's.
	PodUserNamespace bool `json:"podUserNamespace"`
	// NestedUserNamespace says a child could make a user namespace of its own with root mapped
	// (what bubblewrap does).
	NestedUserNamespace bool `json:"nestedUserNamespace"`
	// Seccomp is the seccomp mode: disabled, strict or filter.
	Seccomp    string `json:"seccomp"`
	NoNewPrivs bool   `json:"noNewPrivs"`
	// Capabilities are the effective capabilities, as /proc shows them (hex).
	Capabilities string `json:"capabilities"`
	RootReadOnly bool   `json:"rootReadOnly"`
	// Reach says, of each address probed by name, whether a connection got an answer.
	Reach map[string]Reach `json:"reach,omitempty"`
	// Errors says why a check could not tell, by check.
	Errors map[string]string `json:"errors,omitempty"`
}

// Reach is whether an address answered, and how it did not.
type Reach struct {
	Reachable bool   `json:"reachable"`
	How       string `json:"how"`
	// TLS says, of a target dialed with TLS that answered, whether its certificate verified
	// ("verified") or why not.
	TLS string `json:"tls,omitempty"`
}

// Target is an address the probe dials, by the name the report gives it.
type Target struct {
	Name    string
	Address string // host:port
	// Closed says the address must not answer: while it does, every target is dialed again
	// until Options.Settle has passed.
	Closed bool
	// TLS says the address serves TLS, whose certificate the probe verifies, once it answers,
	// with Options.CAFile (the pool's evalsid CA) for the address's host.
	TLS bool
}

// Options say what to probe.
type Options struct {
	// Targets are dialled over TCP; each must not answer within DialTimeout to be unreachable.
	Targets     []Target
	DialTimeout time.Duration
	// Settle is how long the targets are dialed again (every half second) while a Closed one
	// answers, before the probe says what answers: NetworkPolicy controllers (kube-router among
	// them) program a pod's rules after its containers start, and the probe is the first of them.
	Settle time.Duration
	// Without simulates a node that lacks these primitives ("landlock", "userns"): the probe
	// reports them absent without asking the kernel.
	Without []string
	// TempDir is where the Landlock check makes the two files it reads (the pool's /tmp).
	TempDir string
	// CAFile verifies the certificates of TLS targets; empty: the system's roots.
	CAFile string
}

// ChildEnv is the variable that makes the probe's binary, started again as a child, do one
// check and exit (RunChild): the user namespace check needs a process of its own.
const ChildEnv = "EVALSI_ISOLATION_CHILD"

// RunChild does what a child started by the probe is for and exits, when ChildEnv says the
// process is one; otherwise it returns at once. Call it first thing in main (and TestMain).
func RunChild() {
	switch os.Getenv(ChildEnv) {
	case "":
		return
	case "uid":
		fmt.Print(os.Getuid())
		os.Exit(0)
	default:
		os.Exit(2)
	}
}

// Probe runs every check. It never fails: what it cannot tell is in Report.Errors.
func Probe(ctx context.Context, opts Options) Report {
	r := Report{Errors: map[string]string{}}
	without := func(what string) bool {
		for _, w := range opts.Without {
			if w == what {
				return true
			}
		}
		return false
	}
	if without("landlock") {
		r.Errors["landlock"] = "simulated: the node has no Landlock"
	} else {
		r.LandlockABI, r.LandlockRestricts = landlock(opts.TempDir, r.Errors)
	}
	if without("userns") {
		r.Errors["userns"] = "simulated: the node has no user namespaces"
	} else {
		r.PodUserNamespace = ownUserNamespace(r.Errors)
		r.NestedUserNamespace = nestedUserNamespace(ctx, r.Errors)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		r.Errors["status"] = err.Error()
	}
	fields := statusFields(string(status))
	r.Seccomp = map[string]string{"0": "disabled", "1": "strict", "2": "filter"}[fields["Seccomp"]]
	r.NoNewPrivs = fields["NoNewPrivs"] == "1"
	r.Capabilities = fields["CapEff"]
	var fs unix.Statfs_t
	if err := unix.Statfs("/", &fs); err != nil {
		r.Errors["rootfs"] = err.Error()
	}
	r.RootReadOnly = fs.Flags&unix.ST_RDONLY != 0
	r.Reach = reach(ctx, opts.Targets, opts.DialTimeout, opts.Settle)
	for _, t := range opts.Targets {
		if got := r.Reach[t.Name]; t.TLS && got.Reachable {
			got.TLS = verifyTLS(ctx, t.Address, opts.CAFile, opts.DialTimeout)
			r.Reach[t.Name] = got
		}
	}
	if len(r.Errors) == 0 {
		r.Errors = nil
	}
	return r
}

// statusFields reads the "Name:\tvalue" lines of /proc/self/status.
func statusFields(status string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// Landlock's ABI as the kernel takes it (include/uapi/linux/landlock.h): version 1's ruleset
// attribute, which every later kernel accepts.
const (
	landlockReadFile     = 1 << 2
	landlockRuleBeneath  = 1
	landlockABIQuery     = 1 // LANDLOCK_CREATE_RULESET_VERSION
	landlockRulesetAttrV = 8 // sizeof(struct landlock_ruleset_attr) of ABI 1
)

// landlock returns the kernel's Landlock ABI and whether a ruleset that allows reading files
// beneath one directory keeps a file in another from being read. The ruleset is applied to one
// OS thread that is never given back to the Go runtime, so the probe itself stays unrestricted.
func landlock(tempDir string, errs map[string]string) (abi int, restricts bool) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, landlockABIQuery)
	if errno != 0 {
		errs["landlock"] = "landlock_create_ruleset: " + errno.Error()
		return 0, false
	}
	abi = int(v)
	dir, err := os.MkdirTemp(tempDir, "evalsi-probe-")
	if err != nil {
		errs["landlock"] = "making the files to read: " + err.Error()
		return abi, false
	}
	defer os.RemoveAll(dir)
	allowed, denied := filepath.Join(dir, "allowed"), filepath.Join(dir, "denied")
	for _, d := range []string{allowed, denied} {
		if err := os.Mkdir(d, 0o700); err != nil {
			errs["landlock"] = err.Error()
			return abi, false
		}
		if err := os.WriteFile(filepath.Join(d, "file"), []byte("x"), 0o600); err != nil {
			errs["landlock"] = err.Error()
			return abi, false
		}
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and its ruleset with it.
		runtime.LockOSThread()
		done <- restrictedRead(allowed, denied)
	}()
	if err := <-done; err != nil {
		errs["landlock"] = err.Error()
		return abi, false
	}
	return abi, true
}

// restrictedRead restricts the calling thread to reading files beneath allowed, then checks
// that a file there can be read and one beneath denied cannot.
func restrictedRead(allowed, denied string) error {
	attr := struct{ handledAccessFS uint64 }{landlockReadFile}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), landlockRulesetAttrV, 0)
	if errno != 0 {
		return fmt.Errorf("creating a ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	parent, err := unix.Open(allowed, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", allowed, err)
	}
	defer unix.Close(parent)
	rule := struct {
		allowedAccess uint64
		parentFD      int32
	}{landlockReadFile, int32(parent)}
	// The kernel's struct landlock_path_beneath_attr is packed: 12 bytes.
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, landlockRuleBeneath, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("adding a rule: %w", errno)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("restricting the thread: %w", errno)
	}
	if _, err := readOnThread(filepath.Join(allowed, "file")); err != nil {
		return fmt.Errorf("a file the ruleset allows could not be read: %w", err)
	}
	if _, err := readOnThread(filepath.Join(denied, "file")); !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("a file the ruleset denies was not refused (got %v)", err)
	}
	return nil
}

// readOnThread reads a file with raw system calls, so that they are made on the calling
// (locked) thread.
func readOnThread(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 16)
	n, err := unix.Read(fd, buf)
	return buf[:max(n, 0)], err
}

// ownUserNamespace reports whether the process's user namespace is not the initial one: its
// uid_map does not map the whole range onto itself.
func ownUserNamespace(errs map[string]string) bool {
	m, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		errs["userns"] = err.Error()
		return false
	}
	return strings.Join(strings.Fields(string(m)), " ") != "0 0 4294967295"
}

// nestedUserNamespace starts the probe's own binary in a new user namespace with the caller's
// uid mapped to root, and checks that it says it is root.
func nestedUserNamespace(ctx context.Context, errs map[string]string) bool {
	exe, err := os.Executable()
	if err != nil {
		errs["userns"] = err.Error()
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = []string{ChildEnv + "=uid"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	out, err := cmd.Output()
	if err != nil {
		errs["userns"] = "a nested user namespace: " + err.Error()
		return false
	}
	if uid, _ := strconv.Atoi(string(out)); uid != 0 || len(out) == 0 {
		errs["userns"] = fmt.Sprintf("a nested user namespace did not map root (uid %q)", out)
		return false
	}
	return true
}

// reach dials every target at once, each bounded by timeout; while a Closed target answers, it
// dials them all again, every half second, until settle has passed. A NetworkPolicy controller
// programs a pod's rules together, so the round in which the Closed targets stop answering shows
// what the policy lets through.
func reach(ctx context.Context, targets []Target, timeout, settle time.Duration) map[string]Reach {
	if len(targets) == 0 {
		return nil
	}
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	deadline := time.Now().Add(settle)
	for {
		out := dialAll(ctx, targets, timeout)
		open := false
		for _, t := range targets {
			open = open || (t.Closed && out[t.Name].Reachable)
		}
		if !open || !time.Now().Before(deadline) {
			return out
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// dialAll dials every target at once, each bounded by timeout.
func dialAll(ctx context.Context, targets []Target, timeout time.Duration) map[string]Reach {
	out := make(map[string]Reach, len(targets))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := dial(ctx, t.Address, timeout)
			mu.Lock()
			out[t.Name] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}
