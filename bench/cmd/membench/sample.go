package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/cairn-sd/cairn/bench/benchproc"
)

// Reading the server's memory: /proc/PID/status and smaps, its /metrics,
// and a forced collection through --debug-addr.

// sample is the server's memory at one moment.
type sample struct {
	RSS       uint64 `json:"rss_bytes"`
	RSSAnon   uint64 `json:"rss_anon_bytes"` // of RSS: the process's own memory
	RSSFile   uint64 `json:"rss_file_bytes"` // of RSS: mapped files (bolt's data file, the binary)
	HeapInuse uint64 `json:"heap_inuse_bytes"`
	// Where the rest of the resident set goes: heap spans the runtime
	// holds but has not returned to the kernel (idle − released), and the
	// heap size at which the next collection starts.
	HeapIdle     uint64 `json:"heap_idle_bytes"`
	HeapReleased uint64 `json:"heap_released_bytes"`
	NextGC       uint64 `json:"next_gc_bytes"`
	// HeapAlloc is the bytes of heap objects, live or not yet swept.
	HeapAlloc uint64 `json:"heap_alloc_bytes"`
	// StackInuse is the goroutine stacks, Goroutines their number.
	StackInuse uint64 `json:"stack_inuse_bytes"`
	Goroutines uint64 `json:"goroutines"`
	// RaftDB is the resident part of bolt's mapped raft.db (smaps Rss),
	// counted in RSSFile.
	RaftDB uint64 `json:"raft_db_rss_bytes"`
	// CPU is the server's CPU time so far (process_cpu_seconds_total).
	CPU    float64 `json:"cpu_seconds"`
	Builds uint64  `json:"-"` // status tables published so far
	GCs    uint64  `json:"-"` // garbage collections completed so far
}

// read samples the server's memory.
func (s *server) read(ctx context.Context) (sample, error) {
	var out sample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		return out, fmt.Errorf("reading the server's VmRSS: %w", err)
	}
	if out.RSS, err = benchproc.StatusBytes(b, "VmRSS"); err != nil {
		return out, err
	}
	if out.RSSAnon, err = benchproc.StatusBytes(b, "RssAnon"); err != nil {
		return out, err
	}
	if out.RSSFile, err = benchproc.StatusBytes(b, "RssFile"); err != nil {
		return out, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.httpAddr+"/metrics", nil)
	if err != nil {
		return out, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("/metrics: %s", resp.Status)
	}
	m, err := benchproc.Scrape(resp.Body, "go_memstats_heap_inuse_bytes", "cairn_health_table_build_seconds_count", "go_gc_duration_seconds_count",
		"go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes", "go_memstats_next_gc_bytes",
		"go_memstats_heap_alloc_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines", "process_cpu_seconds_total")
	if err != nil {
		return out, err
	}
	out.HeapInuse, out.Builds, out.GCs = uint64(m[0]), uint64(m[1]), uint64(m[2])
	out.HeapIdle, out.HeapReleased, out.NextGC = uint64(m[3]), uint64(m[4]), uint64(m[5])
	out.HeapAlloc, out.StackInuse, out.Goroutines, out.CPU = uint64(m[6]), uint64(m[7]), uint64(m[8]), m[9]
	sm, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", s.Pid()))
	if err != nil {
		return out, fmt.Errorf("reading the server's smaps: %w", err)
	}
	out.RaftDB, err = mappedRSS(sm, "/raft.db")
	return out, err
}

// mappedRSS sums the Rss of the mappings in smaps whose path ends with
// suffix.
func mappedRSS(smaps []byte, suffix string) (uint64, error) {
	var sum uint64
	in := false // in a mapping of the file
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = len(f) >= 6 && strings.HasSuffix(f[len(f)-1], suffix) // a mapping's header line
			continue
		}
		if !in || len(f) != 3 || f[0] != "Rss:" || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("smaps line %q", line)
		}
		sum += kb * 1024
	}
	return sum, sc.Err()
}

// forceGC makes the server collect (net/http/pprof's heap?gc=1 runs
// runtime.GC before writing the profile) and returns the heap profile
// it wrote.
func (s *server) forceGC(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.debugAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("forcing a collection: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("/debug/pprof/heap: %s", resp.Status)
	}
	return b, err
}
