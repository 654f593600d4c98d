package integration

import (
	"fmt"
	"os"
	"syscall"
)

// SysProcAttr is what the harness starts servers with: the kernel kills
// the child if the process that started it dies first (a panic, a go test
// -timeout, a Ctrl-C of the bench), so that no node outlives its test.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// netlabLock is the file whose lock a process holds while it has the
// netlab network up (NeedNetlab): its names and addresses are fixed.
const netlabLock = "/run/cairn-netlab.lock"

// lockNetlab waits for netlabLock and returns its release.
func lockNetlab() (unlock func(), err error) {
	f, err := os.OpenFile(netlabLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", netlabLock, err)
	}
	return func() { f.Close() }, nil
}
