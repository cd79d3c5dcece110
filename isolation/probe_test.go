package isolation

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"evals.si/operator/internal/podproc"
)

// probeChildEnv makes the test binary, started again, probe with the JSON Options it holds and
// print the Report: the probe seen from a process confined as a pod would be.
const probeChildEnv = "ISOLATION_TEST_PROBE"

func TestMain(m *testing.M) {
	RunChild()
	if opts := os.Getenv(probeChildEnv); opts != "" {
		var o Options
		if err := json.Unmarshal([]byte(opts), &o); err != nil {
			os.Exit(3)
		}
		out, _ := json.Marshal(Probe(context.Background(), o))
		os.Stdout.Write(out)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// silentAddress returns a loopback address that a dial gets no answer from, as one a
// NetworkPolicy drops.
func silentAddress(t *testing.T) string {
	t.Helper()
	addr, stop, err := podproc.SilentAddress()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// answeringAddress returns a loopback address that accepts connections.
func answeringAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// closedAddress returns a loopback address that refuses connections with a TCP reset: no one
// listens there.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestProbeOnThisKernel runs the checks for real on this machine's kernel: Landlock is there and
// a ruleset really keeps a file from being read, a nested user namespace really maps root, an
// address that answers is reachable, one whose host resets the connection too (a firewall's
// ICMP rejection is not: the real node's NetworkPolicy test shows it), and one that never
// answers times out.
func TestProbeOnThisKernel(t *testing.T) {
	r := Probe(context.Background(), Options{
		TempDir:     t.TempDir(),
		DialTimeout: 500 * time.Millisecond,
		Targets: []Target{{Name: "answers", Address: answeringAddress(t)}, {Name: "refuses", Address: closedAddress(t)},
			{Name: MetadataTarget, Address: silentAddress(t)}},
	})
	if r.LandlockABI < 1 || !r.LandlockRestricts {
		t.Errorf("Landlock: ABI %d, restricts %v (%s); this machine's kernel has it", r.LandlockABI, r.LandlockRestricts, r.Errors["landlock"])
	}
	if !r.NestedUserNamespace {
		t.Errorf("a nested user namespace did not map root: %s", r.Errors["userns"])
	}
	want := map[string]Reach{
		"answers":      {Reachable: true, How: "connected"},
		"refuses":      {Reachable: true, How: "refused (a host answered)"},
		MetadataTarget: {How: "no answer within 500ms"},
	}
	if diff := cmp.Diff(want, r.Reach); diff != "" {
		t.Errorf("reach (-want +got):\n%s", diff)
	}
}

// TestSimulatedNodeWithoutPrimitives: --without reports the primitives absent, and the floor
// names them.
func TestSimulatedNodeWithoutPrimitives(t *testing.T) {
	r := Probe(context.Background(), Options{TempDir: t.TempDir(), Without: []string{"landlock", "userns"}})
	if r.LandlockABI != 0 || r.NestedUserNamespace || r.PodUserNamespace {
		t.Fatalf("simulated node without primitives reported %+v", r)
	}
	missing := Floor{Rung: RungLandlock}.Missing(r)
	if len(missing) == 0 || missing[0] != "Landlock (simulated: the node has no Landlock)" {
		t.Errorf("landlock floor on a node without it: %q", missing)
	}
	missing = Floor{Rung: RungBubblewrap, UserNamespaces: true}.Missing(r)
	if diff := cmp.Diff([]string{
		"a user namespace of the pod's own (hostUsers: false) (simulated: the node has no user namespaces)",
		"nested user namespaces that map root (simulated: the node has no user namespaces)",
	}, missing); diff != "" {
		t.Errorf("bubblewrap floor on a node without user namespaces (-want +got):\n%s", diff)
	}
}

// confinedProbe starts the test binary again as a probe confined as a restricted pod's container
// is: uid 65532 (no capabilities), no_new_privs and a seccomp filter (allow-all: the mode is what
// the probe reads), optionally in a user namespace of its own (hostUsers: false).
func confinedProbe(t *testing.T, opts Options, userNamespace bool) Report {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("confining a child as another user needs root, as CI and this machine run")
	}
	exe := confinedCopy(t)
	o, _ := json.Marshal(opts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = []string{probeChildEnv + "=" + string(o)}
	confined := podproc.Confinement{UID: 65532, GID: 65532, NoNewPrivs: true, Seccomp: true, UserNamespace: userNamespace}
	var out bytes.Buffer
	cmd.Stdout = &out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := confined.Run(cmd); err != nil {
		t.Fatalf("the confined probe: %v\n%s", err, stderr.Bytes())
	}
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// confinedCopy returns a copy of the test binary that uid 65532 may run (go test's own is in a
// directory only root may enter).
func confinedCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := podproc.CopyExecutable(self, sharedDir(t, 0o755), "probe.test")
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// sharedDir makes a directory that other users may enter (t.TempDir's parent is root's alone).
func sharedDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "isolation-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFloorsInAConfinedProcess holds each rung's floor to a probe confined as its pods are: a
// landlock pool's restricted container meets it, and so does a bubblewrap pool in a user
// namespace of its own; the same process with metadata answering, or without Landlock, does not.
func TestFloorsInAConfinedProcess(t *testing.T) {
	dir := sharedDir(t, 0o777) // the confined child writes its files here
	silent := silentAddress(t)
	opts := Options{TempDir: dir, DialTimeout: 500 * time.Millisecond, Targets: []Target{{Name: MetadataTarget, Address: silent}}}
	landlock := Floor{Rung: RungLandlock, Unreachable: []string{MetadataTarget}}

	r := confinedProbe(t, opts, false)
	if missing := landlock.Missing(r); len(missing) > 0 {
		t.Errorf("a restricted process on this kernel misses the landlock floor: %q (report %+v)", missing, r)
	}
	if got, want := landlock.Summary(r), "landlock ABI "; !strings.HasPrefix(got, want) ||
		!strings.HasSuffix(got, "; seccomp filter; no_new_privs; no capabilities; metadata unreachable") {
		t.Errorf("summary %q", got)
	}
	if pod := (Floor{Rung: RungPod, Unreachable: []string{MetadataTarget}}).Missing(r); len(pod) > 0 {
		t.Errorf("a restricted process misses the pod floor: %q", pod)
	}

	answering := opts
	answering.Targets = []Target{{Name: MetadataTarget, Address: answeringAddress(t)}}
	if missing := landlock.Missing(confinedProbe(t, answering, false)); !cmp.Equal(missing, []string{"metadata unreachable (connected)"}) {
		t.Errorf("metadata answering: missing %q", missing)
	}
	without := opts
	without.Without = []string{"landlock"}
	if missing := landlock.Missing(confinedProbe(t, without, false)); !cmp.Equal(missing, []string{"Landlock (simulated: the node has no Landlock)"}) {
		t.Errorf("no Landlock: missing %q", missing)
	}

	bwrap := Floor{Rung: RungBubblewrap, UserNamespaces: true, Unreachable: []string{MetadataTarget}}
	if missing := bwrap.Missing(confinedProbe(t, opts, false)); !cmp.Equal(missing, []string{"a user namespace of the pod's own (hostUsers: false)"}) {
		t.Errorf("bubblewrap with host users: missing %q", missing)
	}
	inUserNamespace := confinedProbe(t, opts, true)
	if missing := bwrap.Missing(inUserNamespace); len(missing) > 0 {
		t.Errorf("bubblewrap in a user namespace of its own: missing %q (report %+v)", missing, inUserNamespace)
	}
}
