package main

import (
	"fmt"
	"math"
	"runtime/metrics"
	"slices"
)

// schedLatencies is the runtime's histogram of how long this process's
// goroutines waited, runnable, before they ran.
const schedLatencies = "/sched/latencies:seconds"

// schedLag is the load generator's own delay in noting a delivery:
// between the response reaching a connection and the subscriber's
// goroutine returning from Recv (where the delivery is timed), the
// connection's reader and then the subscriber's goroutine each wait
// for a CPU. With tens of thousands of streams in one process on two
// cores, that wait is the generator's, not the server's; reported
// beside the delivery times, it says how much of a figure is whose.
type schedLag struct {
	start *metrics.Float64Histogram
}

// startSchedLag reads the histogram at the start of a phase.
func startSchedLag() schedLag {
	return schedLag{start: readSchedLatencies()}
}

func readSchedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// lagStats are the waits of a phase: how many, and the percentiles
// (each the upper bound of its bucket, so at most the bucket's width
// high; the runtime's buckets are about 1/8 of their value wide).
type lagStats struct {
	Waits uint64  `json:"waits"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	MaxMs float64 `json:"max_ms"`
}

// stop returns the waits since the start.
func (l schedLag) stop() lagStats {
	end := readSchedLatencies()
	if l.start == nil || end == nil || len(end.Counts) != len(l.start.Counts) {
		return lagStats{}
	}
	counts := slices.Clone(end.Counts)
	var n uint64
	for i := range counts {
		counts[i] -= l.start.Counts[i]
		n += counts[i]
	}
	out := lagStats{Waits: n}
	if n == 0 {
		return out
	}
	at := func(q float64) float64 {
		want := uint64(math.Ceil(q * float64(n)))
		var seen uint64
		for i, c := range counts {
			if seen += c; seen >= max(want, 1) {
				hi := end.Buckets[i+1]
				if math.IsInf(hi, 1) {
					hi = end.Buckets[i]
				}
				return hi * 1000
			}
		}
		return 0
	}
	out.P50ms, out.P99ms, out.P999, out.MaxMs = at(0.5), at(0.99), at(0.999), at(1)
	return out
}

// waitStr prints a wait of v ms, in µs below a millisecond.
func waitStr(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.0f µs", v*1000)
	}
	return msStr(v)
}
