package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// commit is the source the scenarios ran at, as git tells it.
type commit struct {
	Hash  string
	Dirty bool
}

// gitCommit returns HEAD and whether the tree had uncommitted changes
// (git status --porcelain, untracked files included) outside
// docs/scenarios/, where the results and this report are written (as
// each result's own commit is judged), or "unknown".
func gitCommit() commit {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return commit{Hash: "unknown (git rev-parse HEAD: " + err.Error() + ")"}
	}
	c := commit{Hash: strings.TrimSpace(string(out))}
	st, err := exec.Command("git", "status", "--porcelain", "--", ".", ":(exclude)docs/scenarios").Output()
	c.Dirty = err != nil || len(bytes.TrimSpace(st)) > 0
	return c
}

// machine is what the scenarios ran on.
type machine struct {
	CPU    string
	CPUs   int
	MemGiB float64
	Kernel string
	GoVer  string
	GoArch string
}

func (m machine) String() string {
	return fmt.Sprintf("%s, %d CPUs, %.1f GiB memory, Linux %s, %s %s", m.CPU, m.CPUs, m.MemGiB, m.Kernel, m.GoVer, m.GoArch)
}

// readMachine reads the CPU model and count (/proc/cpuinfo), the memory
// (/proc/meminfo), the kernel release and the Go version; what cannot be
// read is "unknown".
func readMachine() machine {
	m := machine{CPU: "unknown CPU", CPUs: runtime.NumCPU(), Kernel: "unknown", GoVer: runtime.Version(), GoArch: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPU, m.CPUs = parseCPUInfo(b, m.CPUs)
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemGiB = parseMemTotal(b)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// parseCPUInfo returns the first "model name" and the number of
// "processor" entries (def if none).
func parseCPUInfo(b []byte, def int) (string, int) {
	model, n := "unknown CPU", 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "processor":
			n++
		case "model name":
			if model == "unknown CPU" {
				model = strings.Join(strings.Fields(v), " ")
			}
		}
	}
	if n == 0 {
		n = def
	}
	return model, n
}

// parseMemTotal returns MemTotal in GiB, 0 if absent.
func parseMemTotal(b []byte) float64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return kb / (1 << 20)
			}
		}
	}
	return 0
}
