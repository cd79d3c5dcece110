package evalsid

import (
	"github.com/prometheus/client_golang/prometheus"
)

// runsDesc describes the runs the server holds per project.
var runsDesc = prometheus.NewDesc("evalsid_runs", "Runs the server holds, by project.", []string{"project"}, nil)

// Collector returns a Prometheus collector of what the server holds: its runs per project. Run
// ids cannot be guessed, so this is how a benchmark or a platform team counts them.
func (s *Server) Collector() prometheus.Collector { return runsCollector{s} }

type runsCollector struct{ s *Server }

func (c runsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- runsDesc }

func (c runsCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	counts := make(map[string]int, len(c.s.runsOf))
	for project, n := range c.s.runsOf {
		counts[project] = n
	}
	c.s.mu.Unlock()
	for project, n := range counts {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(n), project)
	}
}
