package benchproc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

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
