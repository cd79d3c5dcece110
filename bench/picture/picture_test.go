package picture

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDrawAsksEveryPanelsQueries draws the evalsi chart's dashboard from a server that answers
// every range query with one rising series: each panel's queries are asked with the variables
// filled in, and each time series panel has its title and a line in the picture.
func TestDrawAsksEveryPanelsQueries(t *testing.T) {
	board, err := os.ReadFile("../../chart/evalsi/files/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []string
	start := time.Unix(1_800_000_000, 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Query().Get("query"))
		mu.Unlock()
		values := [][2]any{}
		for i := range 10 {
			values = append(values, [2]any{float64(start.Unix() + int64(i*60)), fmt.Sprint(i)})
		}
		json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix",
			"result": []any{map[string]any{"metric": map[string]string{"controller": "evaluator", "pod": "replica-1"}, "values": values}}}})
	}))
	defer srv.Close()
	var out bytes.Buffer
	err = Draw(context.Background(), &out, board, Options{Prometheus: srv.URL, Vars: map[string]string{"namespace": "bench"},
		RateInterval: "8s", Start: start, End: start.Add(10 * time.Minute), Step: time.Minute, Caption: "a test"})
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(board, &d); err != nil {
		t.Fatal(err)
	}
	queries := 0
	for _, p := range d.Panels {
		queries += len(p.Targets)
		if p.Type != "row" && !strings.Contains(out.String(), ">"+html.EscapeString(p.Title)+"<") {
			t.Errorf("panel %q is not in the picture", p.Title)
		}
	}
	if len(asked) != queries {
		t.Errorf("%d queries asked, the dashboard has %d", len(asked), queries)
	}
	for _, q := range asked {
		if strings.Contains(q, "$") || !strings.Contains(q, `namespace="bench"`) {
			t.Errorf("a query asked without its variables filled in: %s", q)
		}
	}
	if paths := strings.Count(out.String(), "<path "); paths < queries {
		t.Errorf("%d lines drawn for %d queries each answered with a series", paths, queries)
	}
}
