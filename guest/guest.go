// Package guest is evalsi-guest, the program a pod rung trial runs: the platform image carries it
// (the operator binary, started under the name evalsi-guest), the trial pod's init container
// copies it into an emptyDir (Install), and the trial's own image runs it from there as its
// command (Run), so that the trial's image needs nothing of the platform's. docs/image.md is the
// contract.
package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Name is the program's name: the binary started as Name is the guest.
const Name = "evalsi-guest"

// Environment the launcher sets on a trial pod (plain values only; evalsi-trial-pods refuses a
// reference to a Secret, ConfigMap or field).
const (
	// ArgvEnv holds the trial's command as a JSON array of strings.
	ArgvEnv = "EVALSI_TRIAL_ARGV"
	// TimeoutEnv bounds the trial, as a duration such as "10m"; none when unset.
	TimeoutEnv = "EVALSI_TRIAL_TIMEOUT"
)

// Install copies the running binary into dir as Name, executable and read-only: the init
// container's work.
func Install(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the guest's own binary: %w", err)
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	dst := filepath.Join(dir, Name)
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying the guest to %s: %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, 0o555)
}

// Result is what a trial came to, written as one JSON line to standard output and to the
// termination message, where the launcher reads it.
type Result struct {
	ExitCode int    `json:"exitCode"`
	Seconds  int64  `json:"seconds"`
	Error    string `json:"error,omitempty"`
}

// Run runs the trial that env describes (ArgvEnv, TimeoutEnv), with stdout and stderr passed on,
// and returns its result: its exit code, 124 past the timeout, 127 when it cannot start. The
// trial gets the environment without the guest's own variables.
func Run(ctx context.Context, env []string, stdout, stderr io.Writer) Result {
	start := time.Now()
	done := func(code int, err error) Result {
		r := Result{ExitCode: code, Seconds: int64(time.Since(start).Seconds())}
		if err != nil {
			r.Error = err.Error()
		}
		return r
	}
	vars := map[string]string{}
	var passed []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "EVALSI_TRIAL_") {
			vars[k] = v
			continue
		}
		passed = append(passed, kv)
	}
	var argv []string
	if err := json.Unmarshal([]byte(vars[ArgvEnv]), &argv); err != nil || len(argv) == 0 {
		return done(127, fmt.Errorf("%s: a JSON array of the trial's command and arguments is required", ArgvEnv))
	}
	if t := vars[TimeoutEnv]; t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return done(127, fmt.Errorf("%s: %q is not a positive duration", TimeoutEnv, t))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = passed, stdout, stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return done(124, fmt.Errorf("the trial ran past %s", vars[TimeoutEnv]))
	case errors.As(err, &exit):
		return done(exit.ExitCode(), nil)
	case err != nil:
		return done(127, fmt.Errorf("starting the trial: %w", err))
	}
	return done(0, nil)
}

// Main is evalsi-guest's entry point, given its arguments: --install DIR, or --class=NAME to run
// the trial. It returns the process's exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "--install" {
		if err := Install(args[1]); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", Name, err)
			return 1
		}
		return 0
	}
	if len(args) != 1 || !strings.HasPrefix(args[0], "--class=") {
		fmt.Fprintf(stderr, "usage: %s --install DIR | %s --class=NAME\n", Name, Name)
		return 2
	}
	r := Run(ctx, os.Environ(), stdout, stderr)
	line, _ := json.Marshal(r)
	fmt.Fprintln(stdout, string(line))
	_ = os.WriteFile("/dev/termination-log", line, 0o644) // best effort: absent outside a pod
	return r.ExitCode
}
