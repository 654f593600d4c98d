package benchproc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's clock tick, the unit of /proc/PID/stat's
// times (USER_HZ: 100 on Linux everywhere Go runs).
const clockTick = 10 * time.Millisecond

// CPU returns pid's user and system CPU time so far.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of %d: %w", pid, err)
	}
	return StatCPU(b)
}

// StatCPU returns the user and system CPU time a /proc/PID/stat text
// gives.
func StatCPU(stat []byte) (time.Duration, error) {
	// The command may hold spaces: fields count from the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/PID/stat %q: no command", stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after the command", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64) // utime, field 14
	st, err2 := strconv.ParseUint(f[12], 10, 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/PID/stat: utime %q, stime %q", f[11], f[12])
	}
	return time.Duration(ut+st) * clockTick, nil
}

// StatusBytes returns a "Field:  123456 kB" line of a /proc/PID/status
// text, in bytes.
func StatusBytes(status []byte, field string) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s line %q", field, sc.Text())
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		return kb * 1024, err
	}
	return 0, fmt.Errorf("no %s line in /proc/PID/status", field)
}

// Scrape returns the values of the named unlabelled samples of a
// Prometheus text exposition, in order; a missing one is an error.
func Scrape(r io.Reader, names ...string) ([]float64, error) {
	vals := make([]float64, len(names))
	found := make([]bool, len(names))
	sc := bufio.NewScanner(io.LimitReader(r, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for i, n := range names {
			if name != n {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return nil, fmt.Errorf("/metrics: %s %q: %w", n, v, err)
			}
			vals[i], found[i] = f, true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("/metrics has no %s", names[i])
		}
	}
	return vals, nil
}
