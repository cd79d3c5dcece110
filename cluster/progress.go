package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// progressInterval is how often a long build says it is still going.
const progressInterval = 30 * time.Second

// buildTimes is the file in the cache that remembers how long each build took on this machine,
// for the estimate of the next cold one.
const buildTimes = "build-times.json"

var buildTimesMu sync.Mutex

// buildLabel names what a go build or install command builds: the last element of each package
// (without its @version; the whole path when that element is a major version).
func buildLabel(args []string) string {
	var names []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-ldflags" || a == "-tags" || a == "-gcflags":
			i++ // its value
			continue
		case strings.HasPrefix(a, "-"):
			continue
		}
		a, _, _ = strings.Cut(a, "@")
		name := path.Base(a)
		if isMajorVersion(name) {
			name = a
		}
		names = append(names, name)
	}
	return strings.Join(names, ", ")
}

// reportProgress writes a line every progressInterval while the build of what runs: how long it
// has taken, and how long the last one took on this machine when that is known. The returned
// function ends the reports and, when the build succeeded, remembers its time.
func (b builder) reportProgress(what string) func(ok bool) {
	start := time.Now()
	last := b.lastBuildTime(what)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				line := fmt.Sprintf("  still building %s: %s so far", what, time.Since(start).Round(time.Second))
				if last > 0 {
					line += fmt.Sprintf(" (it took %s last time on this machine)", last.Round(time.Second))
				}
				fmt.Fprintln(b.progress, line)
			}
		}
	}()
	return func(ok bool) {
		close(done)
		if ok && time.Since(start) > progressInterval {
			b.rememberBuildTime(what, time.Since(start))
		}
	}
}

// lastBuildTime is how long the last build of what took here, 0 when unknown.
func (b builder) lastBuildTime(what string) time.Duration {
	buildTimesMu.Lock()
	defer buildTimesMu.Unlock()
	times := map[string]time.Duration{}
	if data, err := os.ReadFile(filepath.Join(b.cache, buildTimes)); err == nil {
		json.Unmarshal(data, &times)
	}
	return times[what]
}

// rememberBuildTime records that the build of what took d.
func (b builder) rememberBuildTime(what string, d time.Duration) {
	buildTimesMu.Lock()
	defer buildTimesMu.Unlock()
	file := filepath.Join(b.cache, buildTimes)
	times := map[string]time.Duration{}
	if data, err := os.ReadFile(file); err == nil {
		json.Unmarshal(data, &times)
	}
	times[what] = d
	data, err := json.Marshal(times)
	if err != nil {
		return
	}
	tmp := file + fmt.Sprintf(".%d", os.Getpid())
	if os.WriteFile(tmp, data, 0o644) == nil {
		os.Rename(tmp, file)
	}
}
