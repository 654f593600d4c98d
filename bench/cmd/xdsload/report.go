package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// kindStats are one kind's (withdrawals' or admissions') figures.
type kindStats struct {
	Changes   int     `json:"changes"`
	Expected  int64   `json:"expected_deliveries"`
	Delivered int64   `json:"delivered"`
	Shed      int64   `json:"shed"`
	Moot      int64   `json:"moot"` // withdrawals of an admission the subscriber never saw
	Missing   int64   `json:"never_arrived"`
	BeforeAck int64   `json:"before_api_reply"` // seen before the API call returned: counted as 0
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
	T99P50ms  float64 `json:"t99_median_ms"` // time until 99% of a change's subscribers had it: median over changes
	T99P99ms  float64 `json:"t99_p99_ms"`
	T99MaxMs  float64 `json:"t99_max_ms"`
	T99Missed int     `json:"t99_not_reached"` // changes that never reached 99% of their subscribers
	// T99Within5s is the changes that reached 99% of their subscribers
	// within 5 s (SPEC §4's bound for a withdrawal).
	T99Within5s int `json:"t99_within_5s"`
	// From the API call's start rather than its return: the two differ
	// by how much of the propagation a target does before it answers.
	FromCallP99ms float64 `json:"p99_from_call_ms"`
	FromCallP50ms float64 `json:"p50_from_call_ms"`
	FromCallMaxMs float64 `json:"max_from_call_ms"`
	// CDF is the delivery time at each of cdfPercentiles, for plots
	// (bench/cmd/xdsplot).
	CDF        []float64 `json:"cdf_ms"`
	APIP50ms   float64   `json:"api_p50_ms"`
	APIP99ms   float64   `json:"api_p99_ms"`
	Subscribed int64     `json:"-"`
}

type report struct {
	Rev                 string    `json:"rev"`
	Target              string    `json:"target"`
	Mode                string    `json:"mode"`
	Withdraw            string    `json:"withdraw,omitempty"`
	Streams             int       `json:"streams"`
	Conns               int       `json:"conns"`
	Services            int       `json:"services"`
	Endpoints           int       `json:"endpoints"`
	Watch               int       `json:"watch"`
	RatePerMinute       float64   `json:"rate_per_minute"`
	AchievedPerMinute   float64   `json:"achieved_per_minute"`
	Issued              int       `json:"changes"`
	Skipped             int       `json:"ticks_without_a_free_endpoint"`
	APIErrors           int       `json:"api_errors"`
	FirstAPIError       string    `json:"first_api_error,omitempty"`
	ChangeSeconds       float64   `json:"change_seconds"`
	LingerSeconds       float64   `json:"linger_seconds"`
	LingerComplete      bool      `json:"all_seen"`
	AdmitAllSeconds     float64   `json:"admit_all_seconds"`
	StreamsFailed       int       `json:"streams_failed"`
	Withdrawals         kindStats `json:"withdrawals"`
	Admissions          kindStats `json:"admissions"`
	ServerCPUSeconds    float64   `json:"server_cpu_s"`
	ServerCPUPercent    float64   `json:"server_cpu_pct_of_a_core"`
	GeneratorCPUSeconds float64   `json:"generator_cpu_s"`
	// GeneratorLag is how long the generator's goroutines waited for a
	// CPU during the changes (lag.go): its share of each delivery time.
	GeneratorLag        lagStats  `json:"generator_sched_wait"`
	GeneratorPeakRSSMiB float64   `json:"generator_peak_rss_mib"`
	RSSIdleMiB          float64   `json:"rss_idle_mib"`
	RSSStreamsMiB       float64   `json:"rss_streams_mib"`
	RSSAfterMiB         float64   `json:"rss_after_mib"`
	KiBPerSubAdmitted   float64   `json:"kib_per_subscription_admitted"`
	KiBPerSubAfter      float64   `json:"kib_per_subscription_after"`
	Decodes             int64     `json:"decodes"`
	CDFPercentiles      []float64 `json:"cdf_percentiles"` // of each kind's cdf_ms
	DecodeHits          int64     `json:"decode_hits"`
	Go                  string    `json:"go"`
	CPUs                int       `json:"cpus"`

	// Envoys are the real Envoys' figures (-envoys), if any.
	Envoys *envoyReport `json:"envoys,omitempty"`
	// Hostile is what the hostile streams (-hostile) did, if any.
	Hostile *hostileReport `json:"hostile,omitempty"`
	// Evacuation is how the shift of -evacuate-at travelled, if any.
	Evacuation *evacReport `json:"evacuation,omitempty"`
}

// summarize computes the per-kind figures from every subscriber's
// deliveries, of the changes keep keeps (nil: all).
func summarize(o options, w *world, subs []*subscriber, watchers [][]int, keep func(change) bool) report {
	r := report{CDFPercentiles: cdfPercentiles(), Streams: o.streams, Conns: o.conns, Services: o.services, Endpoints: o.endpoints, Watch: o.watch,
		RatePerMinute: o.rate, Go: runtime.Version(), CPUs: runtime.NumCPU()}
	if o.target == "cairn" {
		r.Withdraw = o.withdraw
	}
	n := int(w.log.n.Load())
	changes := w.log.changes[:n]
	// Deliveries grouped by change (counts, then offsets).
	count := make([]int, n+1)
	for _, s := range subs {
		for _, d := range s.deliveries {
			if d.at >= 0 {
				count[d.id+1]++
			}
		}
	}
	for i := 1; i <= n; i++ {
		count[i] += count[i-1]
	}
	lat := make([]time.Duration, count[n])
	fill := slices.Clone(count[:n])
	var before [2]int64
	shedOf := make([]int32, n) // by change: subscribers that never saw it, a later change of its endpoint first
	mootOf := make([]int32, n)
	for _, s := range subs {
		for _, d := range s.deliveries {
			c := changes[d.id]
			switch d.at {
			case shed:
				shedOf[d.id]++
				continue
			case moot:
				mootOf[d.id]++
				continue
			}
			l := d.at - c.commit // clamped below, after the figures from the call
			if l < 0 {
				before[kindOf(c)]++
			}
			lat[fill[d.id]] = l
			fill[d.id]++
		}
	}
	var all, fromCall [2][]time.Duration
	var t99 [2][]time.Duration
	var api [2][]time.Duration
	ks := [2]*kindStats{&r.Withdrawals, &r.Admissions}
	for id, c := range changes {
		if c.failed || keep != nil && !keep(c) {
			continue
		}
		k := kindOf(c)
		st := ks[k]
		st.Changes++
		watching := len(watchers[c.svc])
		st.Expected += int64(watching)
		mine := lat[count[id]:count[id+1]]
		st.Delivered += int64(len(mine))
		for i, l := range mine {
			fromCall[k] = append(fromCall[k], l+c.commit-c.start)
			mine[i] = max(l, 0)
		}
		all[k] = append(all[k], mine...)
		api[k] = append(api[k], c.commit-c.start)
		// 99% of the subscribers it still concerned: one that saw a
		// later change of the endpoint first has nothing left to see.
		need := (99*(watching-int(shedOf[id]+mootOf[id])) + 99) / 100
		if need == 0 {
			continue
		}
		if len(mine) < need {
			st.T99Missed++
			continue
		}
		slices.Sort(mine)
		t99[k] = append(t99[k], mine[need-1])
		if mine[need-1] <= 5*time.Second {
			st.T99Within5s++
		}
	}
	for id, c := range changes {
		if !c.failed && (keep == nil || keep(c)) {
			ks[kindOf(c)].Shed += int64(shedOf[id])
			ks[kindOf(c)].Moot += int64(mootOf[id])
		}
	}
	for k, st := range ks {
		st.BeforeAck = before[k]
		st.Missing = st.Expected - st.Delivered - st.Shed - st.Moot
		slices.Sort(all[k])
		slices.Sort(fromCall[k])
		st.FromCallP50ms, st.FromCallP99ms, st.FromCallMaxMs = ms(pct(fromCall[k], 50)), ms(pct(fromCall[k], 99)), ms(pct(fromCall[k], 100))
		slices.Sort(t99[k])
		slices.Sort(api[k])
		st.P50ms, st.P99ms, st.MaxMs = ms(pct(all[k], 50)), ms(pct(all[k], 99)), ms(pct(all[k], 100))
		st.T99P50ms, st.T99P99ms, st.T99MaxMs = ms(pct(t99[k], 50)), ms(pct(t99[k], 99)), ms(pct(t99[k], 100))
		st.APIP50ms, st.APIP99ms = ms(pct(api[k], 50)), ms(pct(api[k], 99))
		if len(all[k]) > 0 {
			for _, q := range r.CDFPercentiles {
				i := min(int(q/100*float64(len(all[k]))), len(all[k])-1)
				st.CDF = append(st.CDF, ms(all[k][i]))
			}
		}
	}
	return r
}

// cdfPercentiles returns the points of a kind's CDF: every percent,
// then the tail in finer steps.
func cdfPercentiles() []float64 {
	var ps []float64
	for p := range 99 {
		ps = append(ps, float64(p))
	}
	return append(ps, 99, 99.5, 99.9, 99.99, 100)
}

func kindOf(c change) int {
	if c.port == 0 {
		return 0
	}
	return 1
}

func (r report) print() {
	fmt.Printf("<!-- xdsload %s: %s, target %s (%s), %d CPUs, %s; server in its own process, generator in another, loopback -->\n",
		time.Now().UTC().Format(time.RFC3339), r.Rev, r.Target, r.Mode, r.CPUs, r.Go)
	fmt.Println("| target | mode | streams (conns) | changes/min asked → made | withdrawal p50 / p99 / max from the API call's return (from its start), to the subscriber's Recv | withdrawal 99% of subscribers (median / max over changes) | withdrawals shed / moot / missing | admission p50 / p99 / max | admission 99% (median / max) | admissions shed / moot / missing | server CPU | generator CPU | server RSS idle → streams → after | per subscription | all admitted in | withdrawals at 99% within 5 s | hostile streams (names held at the changes) | generator peak RSS |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	kind := func(k kindStats) (string, string, string) {
		miss := ""
		if k.T99Missed > 0 {
			miss = fmt.Sprintf(", %d never", k.T99Missed)
		}
		return fmt.Sprintf("%s / **%s** / %s (from the call: %s / %s / %s)", msStr(k.P50ms), msStr(k.P99ms), msStr(k.MaxMs),
				msStr(k.FromCallP50ms), msStr(k.FromCallP99ms), msStr(k.FromCallMaxMs)),
			fmt.Sprintf("%s / %s%s", msStr(k.T99P50ms), msStr(k.T99MaxMs), miss),
			fmt.Sprintf("%d / %d / %d of %d", k.Shed, k.Moot, k.Missing, k.Expected)
	}
	w1, w2, w3 := kind(r.Withdrawals)
	a1, a2, a3 := kind(r.Admissions)
	hostile, rssIdle := "0", fmt.Sprintf("%.0f", r.RSSIdleMiB)
	if h := r.Hostile; h != nil {
		hostile = fmt.Sprintf("%d (%s)", h.Streams, thousands(h.HeldAtChanges))
		rssIdle += fmt.Sprintf(" → hostile %.0f", h.RSSMiB)
	}
	fmt.Printf("| %s | %s | %d (%d) | %.0f → %.0f | %s | %s | %s | %s | %s | %s | %.1f s (%.0f%% of a core) | %.1f s | %s → %.0f → %.0f MiB | %.1f KiB (after: %.1f) | %.1f s | %d of %d | %s | %.0f MiB |\n",
		r.Target, r.Mode, r.Streams, r.Conns, r.RatePerMinute, r.AchievedPerMinute, w1, w2, w3, a1, a2, a3,
		r.ServerCPUSeconds, r.ServerCPUPercent, r.GeneratorCPUSeconds, rssIdle, r.RSSStreamsMiB, r.RSSAfterMiB,
		r.KiBPerSubAdmitted, r.KiBPerSubAfter, r.AdmitAllSeconds, r.Withdrawals.T99Within5s, r.Withdrawals.Changes, hostile, r.GeneratorPeakRSSMiB)
	if l := r.GeneratorLag; l.Waits > 0 {
		fmt.Printf("\nGenerator during the changes: %.1f s of CPU (%.0f%% of a core); its goroutines waited for a CPU p50 %s, p99 %s, p99.9 %s, max %s (%d waits): a delivery is timed after two such waits (the connection's reader, then the subscriber), so these are the generator's part of its time.\n",
			r.GeneratorCPUSeconds, 100*r.GeneratorCPUSeconds/(r.ChangeSeconds+r.LingerSeconds), waitStr(l.P50ms), waitStr(l.P99ms), waitStr(l.P999), waitStr(l.MaxMs), l.Waits)
	}
	if r.Envoys != nil {
		r.Envoys.print(r)
	}
	if r.Hostile != nil {
		r.Hostile.print()
	}
	if r.Evacuation != nil {
		r.Evacuation.print()
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func msStr(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2f s", v/1000)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// pct returns the p-th percentile (nearest rank) of sorted ds; 100 is
// the max.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := (len(ds)*p + 99) / 100
	return ds[min(max(i-1, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mibOf(b uint64) float64 { return float64(b) / (1 << 20) }

// rss returns pid's resident set (VmRSS).
func rss(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the server's VmRSS: %w", err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := strings.Fields(string(v))
			if len(f) != 2 || f[1] != "kB" {
				break
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS in kB", pid)
}

// selfPeakRSSMiB returns this process's peak resident set.
func selfPeakRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

// selfCPU returns this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// revision names what was measured: the working tree's commit, and the
// binary when one was given (built from that tree by `make bench-xds`).
func revision(ctx context.Context, o options) string {
	rev := "unknown"
	if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		rev = strings.TrimSpace(string(out))
	}
	if o.target == "cairn" && o.bin != "" {
		rev += " (-bin " + o.bin + ")"
	}
	if o.target == "linearcache" && o.peerBin != "" {
		rev += " (-peer-bin " + o.peerBin + ")"
	}
	return rev
}
