package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"evals.si/operator/internal/maketest"
)

// TestMakeFuzzRunsEveryFuzzer holds make fuzz to the fuzz tests there are: each line fuzzes one
// that exists in the package it names, and every fuzz test of the module is fuzzed. go test
// -fuzz with a name its package lacks passes, fuzzing nothing (as the decoders' fuzzers did for
// a while after they moved to reconcile/engine/cached), so only a test notices.
func TestMakeFuzzRunsEveryFuzzer(t *testing.T) {
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^\tgo test (\./\S*) -run '\^\$\$' -fuzz (Fuzz\w+) `)
	var fuzzed []string
	for _, m := range line.FindAllStringSubmatch(string(makefile), -1) {
		fuzzed = append(fuzzed, strings.TrimPrefix(m[1], "./")+" "+m[2])
	}
	if len(fuzzed) == 0 {
		t.Fatal("make fuzz runs no fuzzer, or its lines changed form")
	}
	declared := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	var exist []string
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || fileExists(filepath.Join(path, "go.mod"))) {
			return filepath.SkipDir // another module's (the peer's, netpol's) or none
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range declared.FindAllStringSubmatch(string(src), -1) {
			exist = append(exist, filepath.Dir(path)+" "+m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(fuzzed)
	slices.Sort(exist)
	if diff := cmp.Diff(exist, fuzzed); diff != "" {
		t.Errorf("make fuzz's fuzzers (-declared +Makefile):\n%s", diff)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestMakeBuild types README's `make build`: bin/evalsi-operator, whose version names the
// version and commit make was given.
func TestMakeBuild(t *testing.T) {
	run := maketest.Start(t, nil, "build", "VERSION=v0.0.0-maketest", "COMMIT=0123abc")
	run.Wait(10 * time.Minute)
	out, err := exec.Command("bin/evalsi-operator", "version").CombinedOutput()
	if err != nil {
		t.Fatalf("bin/evalsi-operator version: %v\n%s", err, out)
	}
	if want := "evalsi-operator v0.0.0-maketest (commit 0123abc, Kubernetes 1.37)\n"; string(out) != want {
		t.Errorf("bin/evalsi-operator version printed %q, want %q", out, want)
	}
}
