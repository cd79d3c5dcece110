package bench

import (
	"math"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
)

// TestHeapFromProfile checks the live heap the benchmarks read against pprof's own: a profile with
// no record is 0, one that is not a heap profile is refused, an unsampled one has no error, one
// sampled small object stands for the rate with an error as large, the allocated bytes are read
// from the runtime's statistics at its end, and this process's heap
// profile, with a known 64 MiB held live, counts it. The 64 MiB are eight 8 MiB blocks: the profile samples a
// block with probability 1-exp(-size/rate), so one of 1 MiB (rate 512 KiB) goes unsampled one
// time in seven, and 64 of them came out at 61.1 MiB in CI; one of 8 MiB, one time in 9 million.
func TestHeapFromProfile(t *testing.T) {
	for name, tc := range map[string]struct {
		text    string
		want    heapMeasure
		wantErr bool
	}{
		"no records":           {text: "heap profile: 0: 0 [0: 0] @ heap/1048576\n"},
		"not a heap profile":   {text: "goroutine profile: total 3\n", wantErr: true},
		"unsampled (rate 1)":   {text: "heap profile: 2: 96 [2: 96] @ heap/2\n2: 96 [2: 96] @ 0x1\n", want: heapMeasure{inUse: 96}},
		"freed record skipped": {text: "heap profile: 0: 0 [1: 32] @ heap/1048576\n0: 0 [1: 32] @ 0x1\n"},
		// One sampled object far smaller than the rate stands for about rate bytes (512 KiB
		// here), give or take as much: the estimate of a heap of small objects is that rough.
		"one small object sampled": {
			text: "heap profile: 1: 16 [1: 16] @ heap/1048576\n1: 16 [1: 16] @ 0x1\n",
			want: heapMeasure{inUse: 524296, inUseSE: 524296},
		},
		"allocated": {
			text: "heap profile: 2: 96 [2: 96] @ heap/2\n2: 96 [2: 96] @ 0x1\n\n# runtime.MemStats\n# Alloc = 4096\n# HeapAlloc = 4096\n",
			want: heapMeasure{inUse: 96, allocated: 4096},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := heapFromProfile([]byte(tc.text))
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1+b/1000 }
			if (err != nil) != tc.wantErr || !near(got.inUse, tc.want.inUse) || !near(got.inUseSE, tc.want.inUseSE) || got.allocated != tc.want.allocated {
				t.Errorf("heapFromProfile = %+v, %v; want %+v (error %v)", got, err, tc.want, tc.wantErr)
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
	got, err := heapFromProfile([]byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got.inUse < 64<<20 || got.inUse > 96<<20 {
		t.Errorf("in use %.1f MiB with 64 MiB held", got.inUse/(1<<20))
	}
	if got.allocated < 64<<20 || got.allocated > 96<<20 {
		t.Errorf("allocated %.1f MiB with 64 MiB held", got.allocated/(1<<20))
	}

	runtime.KeepAlive(held)
}
