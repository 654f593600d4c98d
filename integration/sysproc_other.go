//go:build !linux

package integration

import "syscall"

// SysProcAttr is what the harness starts servers with. Only Linux can tie
// a child's life to its parent's; elsewhere it is nil.
func SysProcAttr() *syscall.SysProcAttr { return nil }

// lockNetlab: netlab runs on Linux only (NeedNetlab skips elsewhere).
func lockNetlab() (unlock func(), err error) { return func() {}, nil }
