package clustertest

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// StopWait bounds how long a test waits for something it stopped (a server, an operator, a
// process) to return.
const StopWait = time.Minute

// Await receives the result of something the test stopped from done, waiting at most StopWait:
// past it the test fails naming what did not stop, so that a shutdown that hangs fails the test
// that caused it rather than the package's timeout. ok is false when nothing came.
func Await[T any](t testing.TB, what string, done <-chan T) (result T, ok bool) {
	t.Helper()
	select {
	case result = <-done:
		return result, true
	case <-time.After(StopWait):
		t.Errorf("%s did not stop within %s", what, StopWait)
		return result, false
	}
}

// Interrupt stops cmd with an interrupt and waits for it to exit within StopWait; past it the
// test fails and the process is killed.
func Interrupt(t testing.TB, what string, cmd *exec.Cmd) {
	t.Helper()
	done := make(chan error, 1)
	_ = cmd.Process.Signal(os.Interrupt)
	go func() { done <- cmd.Wait() }()
	if _, ok := Await(t, what, done); !ok {
		_ = cmd.Process.Kill()
		<-done // a killed process exits
	}
}
