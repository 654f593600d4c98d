package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-sd/cairn/bench/benchproc"
	"github.com/cairn-sd/cairn/integration"
)

// fleet is -envoys real Envoy processes (integration.Envoy: the shipped
// bootstrap, delta ADS, one worker thread each) subscribed to the cairn
// server under load. Each subscribes to every cluster (wildcard CDS) and
// so to every service's assignment. A withdrawal is delivered to an
// Envoy when its admin interface first shows it: the host gone or not
// HEALTHY/UNKNOWN. Admissions are matched in passing (so that a later
// withdrawal of the same endpoint can be told) but not timed: no poll
// waits for them.
//
// Polling is bounded: an Envoy's admin is asked only about the services
// with a committed withdrawal it does not show yet, at once when one
// commits and then every -envoy-poll, one request per Envoy at a time; a
// service leaves the set once the Envoy shows each of its withdrawals,
// and the pollers stop with the run. A delivery is timed when the
// answer that shows it arrives: late by at most the poll interval and
// the round trip, both reported.
type fleet struct {
	o        options
	w        *world
	envoys   []*integration.Envoy
	subs     []*subscriber // one per watched Envoy (the first -envoy-watch), watching every service, s.watch[i] == i
	watchers [][]int       // by service: every watched Envoy
	dirty    []*dirtySet   // by watched Envoy

	seen      atomic.Int64 // deliveries and sheds, all Envoys
	polls     atomic.Int64
	pollErrs  atomic.Int64
	firstErr  atomic.Pointer[string]
	rtt       [][]time.Duration // by Envoy: each poll's round trip; only its poller writes
	cpu0      []time.Duration
	layout    time.Duration
	bin       string
	wg        sync.WaitGroup
	stopPolls context.CancelFunc
}

// dirtySet is the services an Envoy has yet to show a withdrawal of,
// each with a generation that a new withdrawal bumps, so that a poller drops a
// service only if no change came after the answer it judged.
type dirtySet struct {
	mu  sync.Mutex
	gen map[int]uint64
	// wake has a value when a change was marked since the poller last
	// looked: it asks at once rather than at its next tick.
	wake chan struct{}
}

func (d *dirtySet) mark(svc int) {
	d.mu.Lock()
	d.gen[svc]++
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dirtySet) snapshot() map[int]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.gen)
}

// drop removes svc unless a change was marked since generation g.
func (d *dirtySet) drop(svc int, g uint64) {
	d.mu.Lock()
	if d.gen[svc] == g {
		delete(d.gen, svc)
	}
	d.mu.Unlock()
}

func (d *dirtySet) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.gen)
}

// startFleet starts the Envoys against the server's xDS address, one at
// a time, and waits until each holds every service's assignment with
// every endpoint in rotation.
func startFleet(ctx context.Context, o options, w *world, dir, grpcAddr string) (*fleet, error) {
	f := &fleet{o: o, w: w, watchers: make([][]int, o.services), rtt: make([][]time.Duration, o.envoyWatch)}
	all := make([]int, o.envoyWatch)
	for i := range all {
		all[i] = i
	}
	for s := range f.watchers {
		f.watchers[s] = all
	}
	f.bin = o.envoyBin
	if f.bin == "" {
		var err error
		if f.bin, err = integration.EnvoyBinary(); err != nil {
			return nil, err
		}
	}
	for i := range o.envoys {
		e, err := integration.NewEnvoy(integration.EnvoyConfig{Dir: filepath.Join(dir, fmt.Sprintf("envoy-%d", i)),
			Servers: []string{grpcAddr}, Node: fmt.Sprintf("xdsload-envoy-%d", i), Bin: f.bin})
		if err == nil {
			err = e.Start()
		}
		if err != nil {
			f.close()
			return nil, fmt.Errorf("starting Envoy %d of %d: %w", i+1, o.envoys, err)
		}
		f.envoys = append(f.envoys, e)
		if i >= o.envoyWatch {
			continue
		}
		s := &subscriber{id: -1 - i, tally: &f.seen}
		for svc := range o.services {
			s.watch = append(s.watch, svc)
			p := make([]int32, o.endpoints)
			for e := range p {
				p[e] = -1
			}
			s.pos = append(s.pos, p)
		}
		f.subs = append(f.subs, s)
		f.dirty = append(f.dirty, &dirtySet{gen: map[int]uint64{}, wake: make(chan struct{}, 1)})
	}
	// Every Envoy holds the whole layout.
	re := "^svc-[0-9]+\\." + namespace + ":" + portName + "$"
	for i := range f.envoys {
		err := benchproc.Poll(ctx, 2*time.Minute, 250*time.Millisecond, func() error {
			got, err := f.fetch(ctx, i, re)
			if err != nil {
				return err
			}
			full := 0
			for _, ps := range got {
				if !slices.ContainsFunc(ps, func(p uint16) bool { return p != basePort }) {
					full++
				}
			}
			if full < o.services {
				return fmt.Errorf("envoy %d holds %d of %d assignments complete", i, full, o.services)
			}
			return nil
		})
		if err != nil {
			f.close()
			return nil, fmt.Errorf("waiting for the layout in Envoy: %w\n%s", err, f.envoys[i].Tail(20))
		}
	}
	return f, nil
}

// close stops the pollers and the Envoys.
func (f *fleet) close() {
	if f.stopPolls != nil {
		f.stopPolls()
	}
	f.wg.Wait()
	for _, e := range f.envoys {
		if e.Running() {
			e.Kill()
		}
		e.CloseIdle()
	}
}

// fetch asks Envoy i for the assignments of the clusters whose names
// match re, as it holds them, and returns them decoded by service.
//
// It reads admin /config_dump's endpoints, filtered by name in Envoy:
// the hosts of each cluster's priority set with their coarse health
// (HEALTHY; a host cairn sent DRAINING shows UNHEALTHY here, DRAINING in
// /clusters). /clusters would say DRAINING, but it has no filter: each
// answer holds every host of every cluster with its stats, too much to
// ask for every few milliseconds.
func (f *fleet) fetch(ctx context.Context, i int, re string) (map[int]ports, error) {
	q := url.Values{"resource": {"dynamic_endpoint_configs"}, "include_eds": {""}, "name_regex": {re}}
	b, err := f.envoys[i].AdminGet(ctx, "/config_dump?"+q.Encode())
	if err != nil {
		return nil, err
	}
	var doc struct {
		Configs []struct {
			EndpointConfig struct {
				ClusterName string `json:"cluster_name"`
				Endpoints   []struct {
					LBEndpoints []struct {
						Endpoint struct {
							Address struct {
								SocketAddress struct {
									Address   string `json:"address"`
									PortValue uint16 `json:"port_value"`
								} `json:"socket_address"`
							} `json:"address"`
						} `json:"endpoint"`
						HealthStatus string `json:"health_status"`
					} `json:"lb_endpoints"`
				} `json:"endpoints"`
			} `json:"endpoint_config"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("envoy admin /config_dump: %w", err)
	}
	out := map[int]ports{}
	for _, c := range doc.Configs {
		svc, ok := f.w.svcOf[c.EndpointConfig.ClusterName]
		if !ok {
			continue
		}
		ps := make(ports, f.o.endpoints)
		for _, l := range c.EndpointConfig.Endpoints {
			for _, h := range l.LBEndpoints {
				if h.HealthStatus != "" && h.HealthStatus != "HEALTHY" && h.HealthStatus != "UNKNOWN" {
					continue
				}
				a, err := netip.ParseAddr(h.Endpoint.Address.SocketAddress.Address)
				if !a.Is4() || err != nil {
					continue
				}
				if ep := int(a.As4()[3]) - 1; ep >= 0 && ep < f.o.endpoints {
					ps[ep] = h.Endpoint.Address.SocketAddress.PortValue
				}
			}
		}
		out[svc] = ps
	}
	return out, nil
}

// mark tells every Envoy's poller that a withdrawal from svc committed.
func (f *fleet) mark(svc int) {
	for _, d := range f.dirty {
		d.mark(svc)
	}
}

// startPolls starts one poller per watched Envoy, and notes each
// Envoy's CPU time.
func (f *fleet) startPolls(ctx context.Context) error {
	ctx, f.stopPolls = context.WithCancel(ctx)
	for i, e := range f.envoys {
		c, err := benchproc.CPU(e.Pid())
		if err != nil {
			return err
		}
		f.cpu0 = append(f.cpu0, c)
		if i < len(f.subs) {
			f.wg.Go(func() { f.poll(ctx, i) })
		}
	}
	return nil
}

// poll asks Envoy i about the services it has to show: at once when a
// change commits, then every -envoy-poll while any is left, until ctx
// is done. One request at a time: at most a request per commit and one
// per -envoy-poll.
func (f *fleet) poll(ctx context.Context, i int) {
	t := time.NewTicker(f.o.envoyPoll)
	defer t.Stop()
	s := f.subs[i]
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.dirty[i].wake:
		}
		dirty := f.dirty[i].snapshot()
		if len(dirty) == 0 {
			continue
		}
		names := make([]string, 0, len(dirty))
		for svc := range dirty {
			names = append(names, strconv.Itoa(svc))
		}
		re := "^svc-(" + strings.Join(names, "|") + ")\\." + namespace + ":" + portName + "$"
		sent := time.Now()
		got, err := f.fetch(ctx, i, re)
		at := f.w.now()
		if err != nil {
			if ctx.Err() == nil {
				f.pollErrs.Add(1)
				msg := err.Error()
				f.firstErr.CompareAndSwap(nil, &msg)
			}
			continue
		}
		f.polls.Add(1)
		f.rtt[i] = append(f.rtt[i], time.Since(sent))
		for svc, g := range dirty {
			ps, ok := got[svc]
			if !ok {
				continue
			}
			s.see(f.w, svc, svc, ps, at)
			if f.shows(svc, ps) {
				f.dirty[i].drop(svc, g)
			}
		}
	}
}

// shows reports whether an Envoy's view of svc, ps, has every endpoint
// whose last change in the log is a withdrawal out of rotation.
func (f *fleet) shows(svc int, ps ports) bool {
	for ep, p := range ps {
		ids := f.w.log.of(svc, ep)
		if len(ids) > 0 && f.w.log.changes[ids[len(ids)-1]].port == 0 && p != 0 {
			return false
		}
	}
	return true
}

// pending returns how many (Envoy, service) pairs are still to be shown.
func (f *fleet) pending() int {
	n := 0
	for _, d := range f.dirty {
		n += d.len()
	}
	return n
}

// rss returns each Envoy's resident set in MiB.
func (f *fleet) rss() ([]float64, error) {
	var out []float64
	for _, e := range f.envoys {
		b, err := rss(e.Pid())
		if err != nil {
			return nil, err
		}
		out = append(out, mibOf(b))
	}
	return out, nil
}

// cpu returns the Envoys' CPU time since startPolls, summed over the
// watched (polled) Envoys and over the others.
func (f *fleet) cpu() (watched, others time.Duration, err error) {
	for i, e := range f.envoys {
		c, err := benchproc.CPU(e.Pid())
		if err != nil {
			return 0, 0, err
		}
		if i < len(f.subs) {
			watched += c - f.cpu0[i]
		} else {
			others += c - f.cpu0[i]
		}
	}
	return watched, others, nil
}

// envoyReport is the fleet's figures.
type envoyReport struct {
	Envoys         int     `json:"envoys"`
	Watched        int     `json:"watched"` // the first this many were polled: the withdrawals' figures are theirs
	Bin            string  `json:"bin"`
	PollMs         float64 `json:"poll_ms"`
	LayoutSeconds  float64 `json:"layout_seconds"` // all Envoys started and holding every assignment
	Polls          int64   `json:"polls"`
	PollErrors     int64   `json:"poll_errors"`
	FirstPollErr   string  `json:"first_poll_error,omitempty"`
	PollRTTP50ms   float64 `json:"poll_rtt_p50_ms"`
	PollRTTP99ms   float64 `json:"poll_rtt_p99_ms"`
	PollsPerSecond float64 `json:"polls_per_second_each"`
	// EndCheck: of the endpoints out at the end (up to 8), how many
	// Envoy 0's /clusters shows as withdrawn (-withdraw deregister: no
	// host; drain: the host with eds_health_status DRAINING).
	EndChecked   int       `json:"end_checked"`
	EndAsWant    int       `json:"end_as_wanted"`
	EndFirst     string    `json:"end_first_mismatch,omitempty"`
	AllShown     bool      `json:"all_shown"`
	Withdrawals  kindStats `json:"withdrawals"`
	RSSLayoutMiB []float64 `json:"rss_layout_mib"` // by Envoy, once it held the layout
	RSSAfterMiB  []float64 `json:"rss_after_mib"`  // by Envoy, after the changes
	CPUSeconds   float64   `json:"cpu_s"`          // all Envoys, during the changes and the linger
	// Each Envoy's share of a core then, on average, of the watched
	// (polled) Envoys and of the others (0: none).
	CPUPercent       float64 `json:"cpu_pct_of_a_core_each"`
	CPUPercentOthers float64 `json:"cpu_pct_of_a_core_each_unwatched"`
}

// minMedMax formats MiB figures as min / median / max.
func minMedMax(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	s := slices.Sorted(slices.Values(v))
	return fmt.Sprintf("%.1f / %.1f / %.1f", s[0], s[len(s)/2], s[len(s)-1])
}

func (e *envoyReport) print(sim report) {
	fmt.Println()
	fmt.Println("| Envoys (timed) | withdrawal to Envoy p50 / p99 / max | simulated subscribers p50 / p99, same run | Envoy ÷ simulated, p50 / p99 | 99% of Envoys (median / max over changes) | withdrawals shed / moot / missing | Envoy RSS each, layout → after (min / median / max MiB) | Envoy CPU each, timed (others) | admin polls each, round trip p50 / p99 | withdrawn at the end, per /clusters |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	w, sw := e.Withdrawals, sim.Withdrawals
	ratio := func(a, b float64) string {
		if b <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	others := ""
	if e.Watched < e.Envoys {
		others = fmt.Sprintf(" (%.1f%%)", e.CPUPercentOthers)
	}
	fmt.Printf("| %d (%d) | %s / **%s** / %s | %s / %s | %s / %s | %s / %s | %d / %d / %d of %d | %s → %s | %.1f%% of a core%s | %.1f/s (at once, then every %s), %s / %s | %d of %d |\n",
		e.Envoys, e.Watched, msStr(w.P50ms), msStr(w.P99ms), msStr(w.MaxMs), msStr(sw.P50ms), msStr(sw.P99ms), ratio(w.P50ms, sw.P50ms), ratio(w.P99ms, sw.P99ms),
		msStr(w.T99P50ms), msStr(w.T99MaxMs), w.Shed, w.Moot, w.Missing, w.Expected,
		minMedMax(e.RSSLayoutMiB), minMedMax(e.RSSAfterMiB), e.CPUPercent, others, e.PollsPerSecond, msStr(e.PollMs), msStr(e.PollRTTP50ms), msStr(e.PollRTTP99ms),
		e.EndAsWant, e.EndChecked)
}

// endCheck asks Envoy 0's /clusters (integration.Envoy.Hosts) about up
// to 8 endpoints that are out at the end, each on port: how many it
// shows as withdrawn (drain: the host DRAINING; deregister: no host),
// and the first that is not.
func (f *fleet) endCheck(ctx context.Context, out [][3]int) (checked, asWanted int, first string) {
	for _, o := range out[:min(len(out), 8)] {
		svc, ep, port := o[0], o[1], o[2]
		hosts, err := f.envoys[0].Hosts(ctx, resourceName(svc))
		checked++
		if err != nil {
			first = cmp.Or(first, err.Error())
			continue
		}
		addr := fmt.Sprintf("%s:%d", endpointAddr(svc, ep), port)
		var got *integration.EnvoyHost
		for i := range hosts {
			if hosts[i].Addr == addr {
				got = &hosts[i]
			}
		}
		switch {
		case f.o.withdraw == "drain" && got != nil && got.Health == "DRAINING",
			f.o.withdraw == "deregister" && got == nil:
			asWanted++
		case got == nil:
			first = cmp.Or(first, fmt.Sprintf("%s: no host %s", resourceName(svc), addr))
		default:
			first = cmp.Or(first, fmt.Sprintf("%s: host %s %s", resourceName(svc), addr, got.Health))
		}
	}
	return checked, asWanted, first
}
