// Package picture draws a Grafana dashboard's panels as one SVG image from what a Prometheus
// server answers to each panel's queries over a time range: the picture of the evalsi chart's
// dashboard in docs is drawn so from a benchmark's run (make bench's -dashboard), since no
// Grafana runs here. It draws time series panels as lines on a shared time axis, in the
// dashboard's own grid, and rows as headings; the queries are the dashboard's own, with its
// variables given.
package picture

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options say where the answers come from and what the dashboard's variables are.
type Options struct {
	// Prometheus is the base URL of the server asked (http://127.0.0.1:9090).
	Prometheus string
	// Vars are the dashboard's variables by name, without the $ (namespace); $__rate_interval
	// is RateInterval.
	Vars         map[string]string
	RateInterval string
	// Start and End are the range drawn; Step the resolution asked for.
	Start, End time.Time
	Step       time.Duration
	// Caption says what run the picture shows.
	Caption string
}

// dashboard is what the picture reads of a dashboard's JSON.
type dashboard struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// series is one line of a panel.
type series struct {
	name   string
	points [][2]float64 // unix seconds, value
}

// The grid: Grafana's is 24 columns wide, each row unit 30 pixels high.
const (
	colWidth  = 50
	rowHeight = 30
	width     = 24 * colWidth
	header    = 60
)

// palette are the lines' colours, in order.
var palette = []string{"#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0", "#508642", "#cca300"}

// Draw writes the SVG picture of dashboardJSON's panels to w, asking opts.Prometheus each panel's
// queries over opts' range.
func Draw(ctx context.Context, w io.Writer, dashboardJSON []byte, opts Options) error {
	var d dashboard
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return fmt.Errorf("reading the dashboard: %w", err)
	}
	bottom := 0
	for _, p := range d.Panels {
		bottom = max(bottom, (p.GridPos.Y+p.GridPos.H)*rowHeight)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, bottom+header)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#111217"/>`+"\n")
	fmt.Fprintf(&b, `<text x="8" y="22" font-size="16" fill="#d8d9da">%s</text>`+"\n", html.EscapeString(d.Title))
	fmt.Fprintf(&b, `<text x="8" y="42" fill="#8e8e8e">%s; %s to %s</text>`+"\n", html.EscapeString(opts.Caption),
		opts.Start.UTC().Format("2006-01-02 15:04:05"), opts.End.UTC().Format("15:04:05 MST"))
	for _, p := range d.Panels {
		x, y := p.GridPos.X*colWidth, header+p.GridPos.Y*rowHeight
		pw, ph := p.GridPos.W*colWidth, p.GridPos.H*rowHeight
		if p.Type == "row" {
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" fill="#d8d9da">%s</text>`+"\n", x+4, y+20, html.EscapeString(p.Title))
			continue
		}
		var lines []series
		for _, t := range p.Targets {
			got, err := queryRange(ctx, opts, expand(t.Expr, opts))
			if err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
			for _, s := range got {
				lines = append(lines, series{name: legend(t.LegendFormat, s.labels), points: s.points})
			}
		}
		slices.SortFunc(lines, func(a, b series) int { return strings.Compare(a.name, b.name) })
		drawPanel(&b, p, lines, opts, x+3, y+3, pw-6, ph-6)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// drawPanel draws one time series panel in the box (x, y, w, h).
func drawPanel(b *strings.Builder, p panel, lines []series, opts Options, x, y, w, h int) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#181b1f" stroke="#2c3235"/>`+"\n", x, y, w, h)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" fill="#d8d9da">%s</text>`+"\n", x+8, y+16, html.EscapeString(p.Title))
	legendRows := min(len(lines), 3)
	left, top, right, foot := x+58, y+26, x+w-10, y+h-20-14*legendRows
	lo, hi := 0.0, 0.0
	for _, s := range lines {
		for _, pt := range s.points {
			lo, hi = math.Min(lo, pt[1]), math.Max(hi, pt[1])
		}
	}
	if hi == lo {
		hi = lo + 1
	}
	t0, t1 := float64(opts.Start.Unix()), float64(opts.End.Unix())
	px := func(t float64) float64 { return float64(left) + (t-t0)/(t1-t0)*float64(right-left) }
	py := func(v float64) float64 { return float64(foot) - (v-lo)/(hi-lo)*float64(foot-top) }
	unit := p.FieldConfig.Defaults.Unit
	for i := range 3 {
		v := lo + (hi-lo)*float64(i)/2
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#2c3235"/>`, left, right, py(v), py(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#8e8e8e">%s</text>`+"\n", left-4, py(v)+4, format(v, unit))
	}
	for i := range 5 {
		t := t0 + (t1-t0)*float64(i)/4
		anchor := map[int]string{0: "start", 4: "end"}[i]
		if anchor == "" {
			anchor = "middle"
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="%s" fill="#8e8e8e">%s</text>`+"\n", px(t), foot+13, anchor, time.Duration((t-t0)*float64(time.Second)).Round(time.Second))
	}
	if len(lines) == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="#8e8e8e">No data</text>`+"\n", (left+right)/2, (top+foot)/2)
	}
	for i, s := range lines {
		colour := palette[i%len(palette)]
		var path strings.Builder
		prev := math.Inf(-1)
		for _, pt := range s.points {
			cmd := "L"
			if pt[0]-prev > 2*opts.Step.Seconds() { // a gap: the series was absent
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, px(pt[0]), py(pt[1]))
			prev = pt[0]
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.TrimSpace(path.String()), colour)
	}
	perRow := 3
	for i, s := range lines {
		row, col := i/perRow, i%perRow
		if row >= legendRows {
			fmt.Fprintf(b, `<text x="%d" y="%d" fill="#8e8e8e">and %d more</text>`+"\n", x+w-70, y+h-6, len(lines)-i)
			break
		}
		lx, ly := left+col*(right-left)/perRow, foot+28+14*row
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d" fill="#c7d0d9">%s</text>`+"\n",
			lx, ly-4, palette[i%len(palette)], lx+14, ly, html.EscapeString(shorten(s.name, 38)))
	}
}

// expand replaces the dashboard's variables in expr.
func expand(expr string, opts Options) string {
	expr = strings.ReplaceAll(expr, "$__rate_interval", opts.RateInterval)
	for k, v := range opts.Vars {
		expr = strings.ReplaceAll(expr, "$"+k, v)
	}
	return expr
}

var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// legend names a series by format, its {{label}}s replaced by labels' values.
func legend(format string, labels map[string]string) string {
	if format == "" {
		return fmt.Sprint(labels)
	}
	return legendLabel.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendLabel.FindStringSubmatch(m)[1]]
	})
}

// format writes v in unit as Grafana's axes do, briefly.
func format(v float64, unit string) string {
	switch unit {
	case "s":
		if math.Abs(v) >= 3600 {
			return strconv.FormatFloat(v/3600, 'f', 1, 64) + " h"
		}
		return strconv.FormatFloat(v, 'g', 3, 64) + " s"
	case "bytes":
		return strconv.FormatFloat(v/(1<<20), 'f', 1, 64) + " MiB"
	case "reqps":
		return strconv.FormatFloat(v, 'g', 3, 64) + "/s"
	case "ops":
		return strconv.FormatFloat(v, 'g', 3, 64) + " ops"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// answered is one series of a range query's answer.
type answered struct {
	labels map[string]string
	points [][2]float64
}

// queryRange asks opts.Prometheus for expr over opts' range.
func queryRange(ctx context.Context, opts Options, expr string) ([]answered, error) {
	q := url.Values{"query": {expr}, "start": {strconv.FormatInt(opts.Start.Unix(), 10)},
		"end": {strconv.FormatInt(opts.End.Unix(), 10)}, "step": {strconv.FormatFloat(opts.Step.Seconds(), 'f', -1, 64)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, opts.Prometheus+"/api/v1/query_range?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking Prometheus %q: %w", expr, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("reading Prometheus's answer to %q: %w", expr, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("Prometheus refused %q: %s", expr, body.Error)
	}
	var out []answered
	for _, r := range body.Data.Result {
		a := answered{labels: r.Metric}
		for _, v := range r.Values {
			t, _ := v[0].(float64)
			s, _ := v[1].(string)
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			a.points = append(a.points, [2]float64{t, f})
		}
		out = append(out, a)
	}
	return out, nil
}
