package benchproc

import (
	"strings"
	"testing"
	"time"
)

func TestScrape(t *testing.T) {
	text := "# HELP go_goroutines x\ngo_goroutines 12\ngo_memstats_heap_inuse_bytes 1.5e+06\nx{a=\"b\"} 3\n"
	v, err := Scrape(strings.NewReader(text), "go_memstats_heap_inuse_bytes", "go_goroutines")
	if err != nil || v[0] != 1.5e6 || v[1] != 12 {
		t.Fatalf("Scrape: %v, %v", v, err)
	}
	if _, err := Scrape(strings.NewReader(text), "nope"); err == nil || !strings.Contains(err.Error(), "no nope") {
		t.Fatalf("a missing sample: %v", err)
	}
}

func TestStatusBytes(t *testing.T) {
	status := []byte("Name:\tcairn\nVmRSS:\t   31800 kB\nRssAnon:\t 9900 kB\n")
	if b, err := StatusBytes(status, "VmRSS"); err != nil || b != 31800*1024 {
		t.Fatalf("VmRSS: %d, %v", b, err)
	}
	if _, err := StatusBytes(status, "RssFile"); err == nil {
		t.Fatal("a missing field read as found")
	}
}

// TestStatCPU: user and system time from a stat line whose command
// holds a space and a parenthesis.
func TestStatCPU(t *testing.T) {
	stat := []byte("4242 (cairn (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 9 0 1234 0 0\n")
	got, err := StatCPU(stat)
	if err != nil || got != 2870*time.Millisecond {
		t.Fatalf("StatCPU = %v, %v; want 2.87s", got, err)
	}
	if _, err := StatCPU([]byte("4242 (cairn) S 1")); err == nil {
		t.Fatal("a short stat line gave no error")
	}
}
