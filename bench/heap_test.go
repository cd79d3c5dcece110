package bench

import (
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
)

// TestInUseBytes checks the live heap the benchmarks read against pprof's own: a profile with no
// record is 0, one that is not a heap profile is refused, and this process's heap profile, with
// a known 64 MiB held live, counts it. The 64 MiB are eight 8 MiB blocks: the profile samples a
// block with probability 1-exp(-size/rate), so one of 1 MiB (rate 512 KiB) goes unsampled one
// time in seven, and 64 of them came out at 61.1 MiB in CI; one of 8 MiB, one time in 9 million.
func TestInUseBytes(t *testing.T) {
	for name, tc := range map[string]struct {
		text    string
		want    float64
		wantErr bool
	}{
		"no records":           {text: "heap profile: 0: 0 [0: 0] @ heap/1048576\n", want: 0},
		"not a heap profile":   {text: "goroutine profile: total 3\n", wantErr: true},
		"unsampled (rate 1)":   {text: "heap profile: 2: 96 [2: 96] @ heap/2\n2: 96 [2: 96] @ 0x1\n", want: 96},
		"freed record skipped": {text: "heap profile: 0: 0 [1: 32] @ heap/1048576\n0: 0 [1: 32] @ 0x1\n", want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := inUseBytes([]byte(tc.text))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("inUseBytes = %v, %v; want %v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}

	held := make([][]byte, 8)
	for i := range held {
		held[i] = make([]byte, 8<<20)
	}
	runtime.GC()
	var sb strings.Builder
	if err := pprof.Lookup("heap").WriteTo(&sb, 1); err != nil {
		t.Fatal(err)
	}
	got, err := inUseBytes([]byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got < 64<<20 || got > 96<<20 {
		t.Errorf("in use %.1f MiB with 64 MiB held", got/(1<<20))
	}
	runtime.KeepAlive(held)
}
