package guest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary be the guest it installs: started as evalsi-guest (by
// TestInstalledGuestRunsATrial), it is Main, as the operator binary is.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == Name {
		os.Exit(Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestInstalledGuestRunsATrial installs the guest into a directory, as the trial pod's init
// container does, and runs the copy as a trial container would: it runs the trial's command
// with the environment but its own variables, passes on its output, and reports its exit code
// as its own and in a JSON line.
func TestInstalledGuestRunsATrial(t *testing.T) {
	dir := t.TempDir()
	if code := Main(context.Background(), []string{"--install", dir}, os.Stdout, os.Stderr); code != 0 {
		t.Fatalf("--install exited %d", code)
	}
	installed := filepath.Join(dir, Name)
	info, err := os.Stat(installed)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o555 {
		t.Errorf("the installed guest's mode %v, want r-xr-xr-x", info.Mode().Perm())
	}
	cmd := exec.Command(installed, "--class=trials")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CASE=7", `EVALSI_TRIAL_ARGV=["sh","-c","echo case $CASE; echo ${EVALSI_TRIAL_ARGV:-unset}; exit 3"]`}
	var out bytes.Buffer
	cmd.Stdout = &out
	err = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("the guest exited %d (%v), want the trial's 3:\n%s", code, err, out.String())
	}
	for _, want := range []string{"case 7\n", "unset\n", `{"exitCode":3,"seconds":0}`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
}

// TestRunReportsWhatCannotRun is a table of trials that cannot run as asked, each with the exit
// code the guest reports.
func TestRunReportsWhatCannotRun(t *testing.T) {
	for name, tc := range map[string]struct {
		env  []string
		code int
		err  string
	}{
		"no command":         {env: nil, code: 127, err: ArgvEnv},
		"not JSON":           {env: []string{ArgvEnv + "=sh -c true"}, code: 127, err: ArgvEnv},
		"no such program":    {env: []string{ArgvEnv + `=["/nonexistent/trial"]`}, code: 127, err: "starting the trial"},
		"a bad timeout":      {env: []string{ArgvEnv + `=["true"]`, TimeoutEnv + "=soon"}, code: 127, err: TimeoutEnv},
		"past its timeout":   {env: []string{"PATH=" + os.Getenv("PATH"), ArgvEnv + `=["sleep","10"]`, TimeoutEnv + "=100ms"}, code: 124, err: "ran past 100ms"},
		"a trial that works": {env: []string{"PATH=" + os.Getenv("PATH"), ArgvEnv + `=["true"]`}, code: 0},
	} {
		t.Run(name, func(t *testing.T) {
			r := Run(context.Background(), tc.env, &bytes.Buffer{}, &bytes.Buffer{})
			if r.ExitCode != tc.code || !strings.Contains(r.Error, tc.err) {
				t.Errorf("%+v, want exit code %d and an error saying %q", r, tc.code, tc.err)
			}
		})
	}
}
