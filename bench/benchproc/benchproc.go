// Package benchproc runs the server a benchmark measures as a child
// process: its output in a log file, ready once a URL answers 200, and
// stopped with SIGTERM, then SIGKILL if it has not exited within 10 s.
// The benchmark commands (bench/cmd/...) share it, so that each starts
// and stops its server alike.
package benchproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/cairn-sd/cairn/integration"
)

// Process is a running child process.
type Process struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
}

// Start starts bin with args, its output in logPath, in a process group
// of its own (integration.SysProcAttr) so that nothing it starts
// outlives the benchmark.
func Start(bin string, args []string, logPath string) (*Process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Process{cmd: exec.Command(bin, args...), logPath: logPath, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = integration.SysProcAttr()
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// TempDir makes a temporary folder for one benchmark named name (its
// servers' data and logs). remove deletes it, unless keep is set: then
// it says on stderr where the folder is and leaves it.
func TempDir(name string, keep bool) (dir string, remove func(), err error) {
	dir, err = os.MkdirTemp("", "cairn-"+name+"-")
	if err != nil {
		return "", nil, err
	}
	if keep {
		fmt.Fprintln(os.Stderr, name+": data dirs and logs in", dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// WaitReady polls url with hc until it answers 200, the process exits,
// d passes or ctx ends.
func (p *Process) WaitReady(ctx context.Context, hc *http.Client, url string, d time.Duration) error {
	return Poll(ctx, d, 50*time.Millisecond, func() error {
		select {
		case <-p.exited:
			return errors.New("the server exited")
		default:
		}
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// Stop sends SIGTERM, and kills the process if it has not exited within
// 10 s. It returns once the process has exited.
func (p *Process) Stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// Tail returns the end of the process's log, for error messages.
func (p *Process) Tail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Poll calls f every interval until it returns nil, d has passed or ctx
// is done; it returns f's last error.
func Poll(ctx context.Context, d, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(interval):
		}
	}
}
