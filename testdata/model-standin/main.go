// Command vllm-standin stands in for vLLM's OpenAI-compatible server in the tests on a real node
// and in trials of the charts: it serves no model. It takes vLLM's arguments as a CheckpointServer
// renders them (the ones it does not know are ignored), answers /health as vLLM does (after
// --standin-health-delay, to play a model loading), lists the served model at /v1/models, and
// refuses that without the key it received through VLLM_API_KEY, as vLLM does. At start it says
// what its pod gave it: the key, /dev/shm, and /checkpoints (read-only or not, and what it holds).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	host, port, served, delay := "0.0.0.0", "8000", "", time.Duration(0)
	for _, a := range os.Args[1:] {
		name, value, _ := strings.Cut(a, "=")
		switch name {
		case "--host":
			host = value
		case "--port":
			port = value
		case "--served-model-name":
			served = value
		case "--lora-modules":
			served, _, _ = strings.Cut(value, "=")
		case "--model":
			if served == "" {
				served = value
			}
		case "--standin-health-delay":
			d, err := time.ParseDuration(value)
			if err != nil {
				fmt.Fprintln(os.Stderr, "vllm-standin: --standin-health-delay:", err)
				os.Exit(2)
			}
			delay = d
		}
	}
	key := os.Getenv("VLLM_API_KEY")
	fmt.Println("vllm-standin: a stand-in for vLLM (testdata/model-standin); it serves no model; args:", strings.Join(os.Args[1:], " "))
	shm, _ := mountOf("/dev/shm")
	fmt.Printf("vllm-standin: key %s; /dev/shm %s; /checkpoints %s\n", presence(key), shm, checkpoints())

	ready := time.Now().Add(delay)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if time.Now().Before(ready) {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"error":"Unauthorized"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{map[string]any{"id": served, "object": "model", "owned_by": "vllm-standin"}}})
	})
	srv := &http.Server{Addr: net.JoinHostPort(host, port), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		fmt.Println("vllm-standin: SIGTERM, ending")
		srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "vllm-standin:", err)
		os.Exit(1)
	}
}

// presence says whether s was given.
func presence(s string) string {
	if s == "" {
		return "absent"
	}
	return "present"
}

// mountOf is the file system type and the mount options (ro or rw first) of the mount at path,
// from the process's mount table: the last mount there is the one in force.
func mountOf(path string) (fsType, options string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "unknown (" + err.Error() + ")", ""
	}
	fsType = "not a mount"
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[4] != path {
			continue
		}
		for i, f := range fields {
			if f == "-" && len(fields) > i+1 {
				fsType, options = fields[i+1], fields[5]
			}
		}
	}
	return fsType, options
}

// checkpoints says how /checkpoints is mounted (ro or rw, from the mount table) and what it
// holds.
func checkpoints() string {
	entries, err := os.ReadDir("/checkpoints")
	if err != nil {
		return "absent (" + err.Error() + ")"
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	_, options := mountOf("/checkpoints")
	mode, _, _ := strings.Cut(options, ",")
	return "mounted " + map[string]string{"ro": "read-only", "rw": "read-write"}[mode] + " (" + options + "), holding [" + strings.Join(names, " ") + "]"
}
