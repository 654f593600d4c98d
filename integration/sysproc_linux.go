package integration

import "syscall"

// SysProcAttr is what the harness starts servers with: the kernel kills
// the child if the process that started it dies first (a panic, a go test
// -timeout, a Ctrl-C of the bench), so that no node outlives its test.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
