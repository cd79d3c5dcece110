package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"evals.si/operator/bench/picture"
	"evals.si/operator/cluster"
)

var dashboardPicture = flag.String("dashboard", "", "BenchmarkShards: scrape the replicas with Prometheus (the Debian package's server) and draw the evalsi chart's dashboard over the run into this SVG file")

// scrapeInterval is how often the benchmark's Prometheus scrapes the replicas.
const scrapeInterval = 2 * time.Second

// promServer is a Prometheus server that scrapes the benchmark's replicas as the chart's
// ServiceMonitor would (job evalsi-operator-metrics, with the namespace and a pod label), so
// that the dashboard's own queries can be drawn over the run (package picture).
type promServer struct {
	cmd       *exec.Cmd
	url, dir  string
	namespace string
	done      chan error

	mu      sync.Mutex
	targets []promTarget
}

type promTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// startPrometheus starts Prometheus for the replicas of namespace ns; nil without -dashboard.
func startPrometheus(b testing.TB, ctx context.Context, ns string) *promServer {
	if *dashboardPicture == "" {
		return nil
	}
	bin, err := cluster.Prometheus(ctx, os.Stderr)
	if err != nil {
		b.Fatal(err)
	}
	addrs, err := freeAddrs(1)
	if err != nil {
		b.Fatal(err)
	}
	p := &promServer{url: "http://" + addrs[0], dir: b.TempDir(), namespace: ns, done: make(chan error, 1)}
	p.writeTargets()
	config := fmt.Sprintf(`global: {scrape_interval: %s, scrape_timeout: 2s}
scrape_configs:
- job_name: evalsi-operator-metrics
  file_sd_configs: [{files: [%q], refresh_interval: 1s}]
`, scrapeInterval, filepath.Join(p.dir, "targets.json"))
	if err := os.WriteFile(filepath.Join(p.dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		b.Fatal(err)
	}
	logs, err := os.Create(filepath.Join(p.dir, "log"))
	if err != nil {
		b.Fatal(err)
	}
	p.cmd = exec.Command(bin, "--config.file="+filepath.Join(p.dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(p.dir, "data"),
		"--web.listen-address="+addrs[0], "--storage.tsdb.retention.time=1d")
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
			b.Fatalf("Prometheus did not get ready: %s", log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scrape adds the metrics endpoint addr of replica pod to the targets.
func (p *promServer) scrape(addr, pod string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, promTarget{Targets: []string{addr}, Labels: map[string]string{"namespace": p.namespace, "pod": pod}})
	p.mu.Unlock()
	p.writeTargets()
}

// writeTargets replaces the file Prometheus reads its targets from.
func (p *promServer) writeTargets() {
	p.mu.Lock()
	data, _ := json.Marshal(append([]promTarget{}, p.targets...))
	p.mu.Unlock()
	tmp := filepath.Join(p.dir, "targets.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err == nil {
		os.Rename(tmp, filepath.Join(p.dir, "targets.json"))
	}
}

// draw writes the picture of the evalsi chart's dashboard over [from, to] into -dashboard.
func (p *promServer) draw(b testing.TB, ctx context.Context, from, to time.Time, caption string) {
	if p == nil {
		return
	}
	dashboard, err := os.ReadFile(filepath.Join("..", "chart", "evalsi", "files", "dashboard.json"))
	if err != nil {
		b.Fatal(err)
	}
	step := max(to.Sub(from)/400, scrapeInterval).Round(time.Second)
	out, err := os.Create(*dashboardPicture)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	err = picture.Draw(ctx, out, dashboard, picture.Options{
		Prometheus: p.url, Vars: map[string]string{"namespace": p.namespace}, RateInterval: max(4*scrapeInterval, step+scrapeInterval).String(),
		Start: from, End: to, Step: step, Caption: caption,
	})
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "the dashboard over the run: %s\n", *dashboardPicture)
}

// stop ends Prometheus.
func (p *promServer) stop() {
	if p == nil {
		return
	}
	p.cmd.Process.Kill()
	<-p.done
}
