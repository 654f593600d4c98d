package integration

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one process the harness runs, a server (Node) or an agent
// (Agent), across its starts: its output is appended to LogPath, the
// kernel kills it if the process that started it dies (SysProcAttr), and
// its exit is awaited in the background.
type proc struct {
	// name is the process in errors and in the harness's lines; LogPath
	// is its log, which every start appends to.
	name    string
	LogPath string
	logf    func(format string, args ...any)

	mu      sync.Mutex
	cmd     *exec.Cmd     // nil when not started
	done    chan struct{} // closed when cmd has exited
	exitErr error
}

// start runs bin with args, after a line in the log naming the command.
// It fails if the process runs already. about is added to the harness's
// line saying it started.
func (p *proc) start(bin string, args []string, about string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("integration: %s runs already (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "=== harness %s: %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = childEnv()
	cmd.SysProcAttr = SysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("integration: starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	p.logf("started %s (pid %d): %s", p.name, cmd.Process.Pid, about)
	return nil
}

// childEnv is the test's environment without CAIRN_* variables, so that
// a developer's CAIRN_TOKEN or CAIRN_DATA_DIR cannot change the servers.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAIRN_") {
			env = append(env, kv)
		}
	}
	return env
}

// Running reports whether the process runs (or is paused).
func (p *proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) state() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.cmd == nil:
		return "never started"
	case isClosed(p.done):
		return fmt.Sprintf("exited: %v", p.exitErr)
	default:
		return fmt.Sprintf("running, pid %d", p.cmd.Process.Pid)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *proc) Kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	p.wait(0)
	p.logf("killed %s", p.name)
	return nil
}

// Stop sends SIGTERM and waits up to 15s for a clean exit; a process
// that does not exit by then is killed and Stop fails. A non-zero exit
// status is an error too.
func (p *proc) Stop() error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if !p.wait(15 * time.Second) {
		p.Kill()
		return fmt.Errorf("integration: %s did not exit within 15s of SIGTERM; killed", p.name)
	}
	p.mu.Lock()
	err := p.exitErr
	p.mu.Unlock()
	p.logf("stopped %s: %v", p.name, err)
	if err != nil {
		return fmt.Errorf("integration: %s exited after SIGTERM with %w", p.name, err)
	}
	return nil
}

// Pid returns the process's id, 0 if it was never started. After an
// exit it is the last run's.
func (p *proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Pause stops the process (SIGSTOP) without killing it; Resume continues
// it.
func (p *proc) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (p *proc) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return fmt.Errorf("integration: %s does not run", p.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("integration: signalling %s: %w", p.name, err)
	}
	return nil
}

// wait waits for the process to exit, at most d (0: no limit), and
// reports whether it did.
func (p *proc) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if d == 0 {
		<-done
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Tail returns the last lines of the process's log.
func (p *proc) Tail(lines int) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
