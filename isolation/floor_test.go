package isolation

import (
	"context"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"evals.si/operator/internal/podproc"
)

// TestFloorHoldsEveryMetadataAddress: the floor holds each cloud's metadata address to not
// answering, and names the one that answers; the summary says them as one while none does.
func TestFloorHoldsEveryMetadataAddress(t *testing.T) {
	targets := MetadataTargets()
	if len(targets) != len(MetadataAddresses) || targets[0].Name != MetadataTarget {
		t.Fatalf("metadata targets %v", targets)
	}
	var names []string
	for _, tg := range targets {
		if !tg.Closed || !IsMetadata(tg.Name) {
			t.Errorf("target %+v: want it closed and a metadata target", tg)
		}
		names = append(names, tg.Name)
	}
	floor := Floor{Rung: RungPod, Unreachable: names}
	silent := func() Report {
		r := Report{Seccomp: "filter", NoNewPrivs: true, Capabilities: "0000000000000000", Reach: map[string]Reach{"kubernetes": {How: "timed out"}}}
		for _, n := range names {
			r.Reach[n] = Reach{How: "timed out"}
		}
		return r
	}
	for name, tc := range map[string]struct {
		answering string
		missing   []string
		summary   string
	}{
		"none answers": {summary: "seccomp filter; no_new_privs; no capabilities; kubernetes unreachable; metadata unreachable"},
		"Azure's WireServer answers": {answering: "metadata-168.63.129.16", missing: []string{"metadata-168.63.129.16 unreachable (connected)"},
			summary: "seccomp filter; no_new_privs; no capabilities; kubernetes unreachable; metadata-168.63.129.16 reachable"},
		"AWS over IPv6 answers": {answering: "metadata-fd00:ec2::254", missing: []string{"metadata-fd00:ec2::254 unreachable (connected)"},
			summary: "seccomp filter; no_new_privs; no capabilities; kubernetes unreachable; metadata-fd00:ec2::254 reachable"},
	} {
		t.Run(name, func(t *testing.T) {
			r := silent()
			if tc.answering != "" {
				r.Reach[tc.answering] = Reach{Reachable: true, How: "connected"}
			}
			if diff := cmp.Diff(tc.missing, floor.Missing(r)); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
			if got := floor.Summary(r); got != tc.summary {
				t.Errorf("summary %q, want %q", got, tc.summary)
			}
		})
	}
}

// TestDialOverIPv6 dials IPv6 loopback addresses, as the probe dials the IPv6 metadata addresses:
// one that accepts is reachable, one where no one listens is refused by its host, and neither
// panics (an IPv6 address was once converted to IPv4).
func TestDialOverIPv6(t *testing.T) {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer l.Close()
	if got := dial(context.Background(), l.Addr().String(), time.Second); !got.Reachable || got.How != "connected" {
		t.Errorf("an IPv6 listener: %+v, want connected", got)
	}
	closed, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	if got := dial(context.Background(), addr, time.Second); !got.Reachable || got.How != "refused (a host answered)" {
		t.Errorf("an IPv6 port no one listens on: %+v, want refused by its host", got)
	}
}

// TestDialIsNotFooledBySignals dials a silent address while the process is sent signals, as the
// Go runtime preempts its threads with SIGURG under load: a poll a signal interrupts is no
// answer. (Such a poll once read as "connected", and a probe under load saw metadata answer.)
func TestDialIsNotFooledBySignals(t *testing.T) {
	addr, stop, err := podproc.SilentAddress()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				syscall.Kill(os.Getpid(), syscall.SIGURG)
				time.Sleep(200 * time.Microsecond)
			}
		}
	}()
	defer close(done)
	var wg sync.WaitGroup
	got := make([]Reach, 4)
	for i := range got {
		wg.Go(func() { got[i] = dial(context.Background(), addr, 700*time.Millisecond) })
	}
	wg.Wait()
	for i, r := range got {
		if r.Reachable {
			t.Errorf("dial %d of a silent address under signals: %+v, want no answer", i, r)
		}
	}
}
