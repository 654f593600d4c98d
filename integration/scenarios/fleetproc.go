package scenarios

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/scenarios/fleet"
)

// EnvFleetBin names a prebuilt cairn-fleet binary to use instead of
// building one.
const EnvFleetBin = "CAIRN_FLEET_BIN"

var fleetBuild struct {
	once sync.Once
	bin  string
	err  error
}

// FleetBinary returns the path of the cairn-fleet binary: $CAIRN_FLEET_BIN
// if set, otherwise one built with `go build` (without -race: the fleet
// is the region's scenery, and its memory is a figure) into a temporary
// directory, once per process. RemoveFleetBinary deletes it.
func FleetBinary() (string, error) {
	fleetBuild.once.Do(func() {
		if p := os.Getenv(EnvFleetBin); p != "" {
			fleetBuild.bin, fleetBuild.err = filepath.Abs(p)
			return
		}
		dir, err := os.MkdirTemp("", "cairn-fleet-bin-")
		if err != nil {
			fleetBuild.err = err
			return
		}
		bin := filepath.Join(dir, "cairn-fleet")
		args := []string{"build", "-o", bin, "github.com/cairn-sd/cairn/integration/scenarios/fleet/cmd/cairn-fleet"}
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			fleetBuild.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		fleetBuild.bin = bin
	})
	return fleetBuild.bin, fleetBuild.err
}

// RemoveFleetBinary deletes the binary FleetBinary built (never one
// named by $CAIRN_FLEET_BIN). Call it from TestMain.
func RemoveFleetBinary() {
	if fleetBuild.bin != "" && os.Getenv(EnvFleetBin) == "" {
		os.RemoveAll(filepath.Dir(fleetBuild.bin))
	}
}

// FleetProcess is a running cairn-fleet and a client of its control API.
type FleetProcess struct {
	*fleet.Control
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// StartFleet writes spec into dir, runs cairn-fleet on it (its standard
// error to dir/fleet.log) and waits until it says it is ready, at most
// timeout.
func StartFleet(dir string, spec fleet.Spec, timeout time.Duration) (*FleetProcess, error) {
	return StartFleetIn(dir, spec, timeout, "")
}

// StartFleetIn is StartFleet in the network namespace netns (ip netns
// exec, which runs the fleet as its own process); "" is this one. The
// spec's Control must then be an address this namespace reaches.
func StartFleetIn(dir string, spec fleet.Spec, timeout time.Duration, netns string) (*FleetProcess, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	bin, err := FleetBinary()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	specPath := filepath.Join(dir, "fleet.json")
	if err := os.WriteFile(specPath, b, 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "fleet.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own descriptor
	cmd := exec.Command(bin, specPath)
	if netns != "" {
		cmd = exec.Command("ip", "netns", "exec", netns, bin, specPath)
	}
	cmd.Stderr = log
	cmd.SysProcAttr = integration.SysProcAttr()
	first := &firstLine{line: make(chan string, 1)}
	cmd.Stdout = first
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &FleetProcess{LogPath: log.Name(), cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	fail := func(err error) (*FleetProcess, error) {
		p.Close()
		tail, _ := os.ReadFile(p.LogPath)
		return nil, fmt.Errorf("cairn-fleet: %w\n%s", err, tail)
	}
	select {
	case line := <-first.line:
		url, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
		if !ok {
			return fail(fmt.Errorf("first line %q; want \"ready <URL>\"", line))
		}
		p.Control = fleet.NewControl(url)
	case <-p.done:
		return fail(errors.New("exited before it was ready"))
	case <-time.After(timeout):
		return fail(fmt.Errorf("not ready after %s", timeout))
	}
	return p, nil
}

// PID is the process's id.
func (p *FleetProcess) PID() int { return p.cmd.Process.Pid }

// RSS reads the process's resident memory from /proc, in bytes.
func (p *FleetProcess) RSS(ctx context.Context) (int64, error) {
	st, err := p.Stats(ctx)
	if err != nil {
		return 0, err
	}
	if st.RSSBytes == 0 {
		return 0, errors.New("cairn-fleet: no RSS reported (not Linux?)")
	}
	return st.RSSBytes, nil
}

// Close stops the process (SIGTERM, then SIGKILL after 5 s) and waits
// for it.
func (p *FleetProcess) Close() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// firstLine is a process's standard output: it hands over the first
// line and drops the rest.
type firstLine struct {
	mu   sync.Mutex
	buf  []byte
	sent bool
	line chan string
}

func (f *firstLine) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sent {
		return len(b), nil
	}
	f.buf = append(f.buf, b...)
	if i := bytes.IndexByte(f.buf, '\n'); i >= 0 {
		f.sent = true
		f.line <- string(f.buf[:i+1])
	}
	return len(b), nil
}
