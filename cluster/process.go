package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one control-plane component running as a child process with its output in a log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	// dir, bin, env and args start it again (restart).
	dir, bin  string
	env, args []string
}

// startProcess starts bin with args and env added to this process's environment, writing its
// output to dir/name.log. The child is in its own
// process group and is killed by the kernel if this process dies (Pdeathsig), so that a crashed or
// killed test leaves nothing running.
func startProcess(dir, name, bin string, env []string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{}), dir: dir, bin: bin, env: env, args: args}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// restart starts the process again as it was started, with its log appended to.
func (p *process) restart() (*process, error) {
	old, _ := os.ReadFile(p.log)
	n, err := startProcess(p.dir, p.name, p.bin, p.env, p.args...)
	if err != nil {
		return nil, err
	}
	// The new process writes to a new file at the same path; keep the old lines before them.
	if f, err := os.OpenFile(p.log+".previous", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		f.Write(old)
		f.Close()
	}
	return n, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// failure describes a component that did not come up, with the last lines of its log.
func (p *process) failure(what error) error {
	state := "still running"
	if p.exited() {
		state = fmt.Sprintf("exited: %v", p.err)
	}
	out, _ := os.ReadFile(p.log)
	return fmt.Errorf("%s did not start (%s): %w\nlast lines of %s:\n%s", p.name, state, what, p.log, tail(out, 25))
}

// stop ends the process group: SIGTERM, then SIGKILL after the grace period.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// poll calls check every interval until it returns nil, the process exits, or ctx ends.
func (p *process) poll(ctx context.Context, interval time.Duration, check func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.failure(err)
		case <-ctx.Done():
			return p.failure(fmt.Errorf("%w (last check: %v)", ctx.Err(), err))
		case <-t.C:
		}
	}
}
