package bench

import (
	"fmt"
	"slices"
	"strings"
)

// figure is one row of the table: a measure of a round, its unit and how to print it.
type figure struct {
	name   string
	format string
	value  func(r roundResult, n int) float64
}

// figures are the table's rows, per size.
var figures = []figure{
	{"time to converge (all children and statuses), s", "%.2f", func(r roundResult, _ int) float64 { return r.converge.Seconds() }},
	{"CPU to converge, s", "%.2f", func(r roundResult, _ int) float64 { return r.cpuConverge.Seconds() }},
	{"time until every pool is Ready, s", "%.2f", func(r roundResult, _ int) float64 { return r.ready.Seconds() }},
	{"peak RSS, MiB", "%.0f", func(r roundResult, _ int) float64 { return r.peakRSS / (1 << 20) }},
	{"live heap at steady state (allocated right after a collection), MiB", "%.1f", func(r roundResult, _ int) float64 { return r.liveHeap.allocated / (1 << 20) }},
	{"live heap at steady state, the heap profile's estimate, MiB", "%.1f", func(r roundResult, _ int) float64 { return r.liveHeap.inUse / (1 << 20) }},
	{"writes to converge, per Evaluator", "%.2f", func(r roundResult, n int) float64 { return float64(r.writesConverge.total()) / float64(n) }},
	{"writes until Ready, per Evaluator", "%.2f", func(r roundResult, n int) float64 { return float64(r.writesReady.total()) / float64(n) }},
	{"reconciles until Ready", "%.0f", func(r roundResult, _ int) float64 { return r.reconciles }},
	{"writes in the idle window", "%.0f", func(r roundResult, _ int) float64 { return float64(r.writesIdle.total()) }},
	{"restart: until every Evaluator was reconciled, s", "%.2f", func(r roundResult, _ int) float64 { return r.restart.Seconds() }},
	{"restart: writes", "%.0f", func(r roundResult, _ int) float64 { return float64(r.writesRestart.total()) }},
	{"Ready Events written over 5 s after the status", "%.0f", func(r roundResult, _ int) float64 { return float64(r.lateEvents) }},
	{"latest Ready Event after its status, s", "%.0f", func(r roundResult, _ int) float64 { return r.eventLag.Seconds() }},
	// The creators share the control plane with the contender: no contender converges before this.
	{"time until the last create returned, s", "%.2f", func(r roundResult, _ int) float64 { return r.created.Seconds() }},
}

// table prints, per size, each figure's median for both contenders (with min and max of the
// rounds) and the ratio of the medians; then the live heap per extra Evaluator between the
// smallest and the largest size, and the writes by resource of each contender's first round.
func table(sizes []int, cs []contender, results map[int]map[string][]roundResult) string {
	var sb strings.Builder
	a, b := cs[0].name, cs[1].name
	fmt.Fprintf(&sb, "\n| Evaluators | figure | %s median (min-max) | %s median (min-max) | ratio |\n|---|---|---|---|---|\n", a, b)
	for _, n := range sizes {
		for _, f := range figures {
			ma, ca := spread(results[n][a], n, f)
			mb, cb := spread(results[n][b], n, f)
			ratio := "-"
			if mb != 0 {
				ratio = fmt.Sprintf("%.2f", ma/mb)
			}
			fmt.Fprintf(&sb, "| %d | %s | %s | %s | %s |\n", n, f.name, ca, cb, ratio)
		}
	}
	if len(sizes) > 1 {
		lo, hi := slices.Min(sizes), slices.Max(sizes)
		heap := figures[4]
		cpu := figures[1]
		perEv := func(name string) float64 {
			h, _ := spread(results[hi][name], hi, heap)
			l, _ := spread(results[lo][name], lo, heap)
			return (h - l) * (1 << 20) / float64(hi-lo) / 1024
		}
		growth := func(name string) float64 {
			h, _ := spread(results[hi][name], hi, cpu)
			l, _ := spread(results[lo][name], lo, cpu)
			return h / l
		}
		fmt.Fprintf(&sb, "| %d to %d | live heap per extra Evaluator (with its children), KiB | %.1f | %.1f | %.2f |\n",
			lo, hi, perEv(a), perEv(b), perEv(a)/perEv(b))
		fmt.Fprintf(&sb, "| %d to %d | growth of CPU to converge | %.2fx | %.2fx | - |\n", lo, hi, growth(a), growth(b))
	}
	sb.WriteString("\nWrites by resource (first round):\n")
	for _, n := range sizes {
		for _, name := range []string{a, b} {
			r := results[n][name][0]
			fmt.Fprintf(&sb, "- %d, %s: to converge: %s; until Ready: %s; idle: %s; restart: %s\n",
				n, name, r.writesConverge, r.writesReady, r.writesIdle, r.writesRestart)
		}
	}
	return sb.String()
}

// spread returns the median of f over rounds, and "median (min-max)" formatted.
func spread(rounds []roundResult, n int, f figure) (float64, string) {
	var vs []float64
	for _, r := range rounds {
		vs = append(vs, f.value(r, n))
	}
	if len(vs) == 0 {
		return 0, "-"
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return med, fmt.Sprintf(f.format+" ("+f.format+"-"+f.format+")", med, vs[0], vs[len(vs)-1])
}
