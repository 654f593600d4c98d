package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.yaml.in/yaml/v3"

	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// alertRules is the ready-made alert rule file of deploy/.
const alertRules = "../../deploy/prometheus/cairn-alerts.yaml"

// TestBadCheck is experiment 3 of the seed: a check configuration that
// fails every replica of one service, pushed with `cairn apply -f` (the
// check path changed to one the instances answer 404 on). The service
// degrades with health_disregarded: its view and DNS keep every replica
// (DNS with EDE 0 "health-disregarded"), an event says so, the metric
// cairn_health_disregarded_services is 1 (on the leader, whose evaluator
// sets it), and nothing is drained. Until half the replicas have failed,
// the first to fail may be withdrawn within the shrink cap, as SPEC §2
// has it; once disregarded, every replica is served. The good check
// pushed back clears it. The alert
// rule of deploy/ names only metrics a running server exports.
func TestBadCheck(t *testing.T) {
	r := StartRegion(t, SizeConfig())
	res := NewResult("bad-check", "A check that fails every replica: health disregarded, nothing drained")
	res.Note("%s", r.StartTimes)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	// The target: the first http service registered through the Go
	// client, its check every second, and an A record for each replica.
	var target ServiceSpec
	for _, s := range r.Services {
		if s.Kind == "http" && s.Registrar == ByClient {
			target = s
			break
		}
	}
	good := target
	good.Check = "{type: http, port: main, path: /ready, interval: 1s, timeout: 500ms}"
	good.Policy = "{lease_ttl: 1h, slow_start: 0s, a_record_limit: 64}"
	bad := good
	bad.Check = "{type: http, port: main, path: /healthz, interval: 1s, timeout: 500ms}"
	n := target.Count
	res.Note("target %s: %d replicas in zones %s, check %s; the bad one asks /healthz, which answers 404",
		target.Key(), n, strings.Join(Zones(), ", "), good.Check)
	if err := r.Apply(ctx, good); err != nil {
		t.Fatal(err)
	}
	integration.Eventually(t, time.Minute, func() error { return viewState(ctx, r, target.Name, n, false) })
	evs, err := r.Node("a").Client().Events(ctx, Namespace, target.Name, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var before uint64
	if len(evs) > 0 {
		before = evs[len(evs)-1].Seq
	}

	// Watch the view through the change: the fewest replicas it served,
	// and any lifecycle other than ready.
	mon := watchView(ctx, r, target.Name)
	appliedAt := time.Now()
	mon.phase(0)
	if err := r.Apply(ctx, bad); err != nil {
		t.Fatal(err)
	}
	applyTook := time.Since(appliedAt)
	var seenAfter time.Duration
	err = integration.Poll(2*time.Minute, 100*time.Millisecond, func() error {
		if err := viewState(ctx, r, target.Name, n, true); err != nil {
			return err
		}
		seenAfter = time.Since(appliedAt)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mon.phase(1)
	res.Add("apply → health_disregarded in the view, on every server", "< 15 s", seenAfter.Round(10*time.Millisecond).String(), seenAfter < 15*time.Second)
	res.Note("cairn apply -f took %s", applyTook.Round(time.Millisecond))
	res.Note("when health_disregarded was first seen, every server's API view served all %d replicas (the condition the time above waited for)", n)

	// DNS keeps every replica, with EDE 0 health-disregarded.
	for _, node := range r.Nodes() {
		var got int
		var ede string
		err := integration.Poll(10*time.Second, 100*time.Millisecond, func() error {
			var err error
			got, ede, err = askA(ctx, node.DNSAddr, target.Name)
			if err != nil {
				return err
			}
			if got != n || !strings.HasPrefix(ede, "0 health-disregarded") {
				return fmt.Errorf("%s DNS: %d A records, EDE %q", node.ID, got, ede)
			}
			return nil
		})
		res.Add(fmt.Sprintf("DNS answer of %s (zone %s)", node.ID, Zones()[node.Index-1]), fmt.Sprintf("%d A, EDE 0 health-disregarded", n),
			fmt.Sprintf("%d A, EDE %q", got, ede), err == nil)
	}

	// An event, and the metric: the leader's evaluator sets it, the
	// followers' stays 0, so the alert rule takes the max over servers.
	ev, err := waitEvent(ctx, r, target.Name, before, wire.EventHealthDisregarded)
	res.Add("event health_disregarded", "raised", eventValue(ev, err), err == nil)
	leader, err := r.Cluster.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	var highest float64
	err = integration.Poll(15*time.Second, 100*time.Millisecond, func() error {
		values, highest = nil, 0
		for _, node := range r.Nodes() {
			v, err := node.Metric(ctx, "cairn_health_disregarded_services")
			if err != nil {
				return err
			}
			values = append(values, fmt.Sprintf("%s=%v", node.ID, v))
			highest = max(highest, v)
			want := float64(0) // the leader's gauge: 0 on the other servers
			if node == leader {
				want = 1
			}
			if v != want {
				return fmt.Errorf("%s (leader %s): %v, want %v", node.ID, leader.ID, v, want)
			}
		}
		return nil
	})
	res.Add("cairn_health_disregarded_services (leader "+leader.ID+")", "1 on the leader, 0 elsewhere", strings.Join(values, " "), err == nil)
	res.Add("alert expression max(cairn_health_disregarded_services) > 0 over the servers", "true", fmt.Sprint(highest > 0), highest > 0)

	// The alert rule names only metrics a server exports.
	missing, names, err := alertRuleMetrics(ctx, r.Node("a"))
	if err != nil {
		t.Fatal(err)
	}
	res.Add("metrics the alert rule names, exported by a server", strings.Join(names, ", "),
		fmt.Sprintf("%d of %d (missing: %v)", len(names)-len(missing), len(names), missing), len(missing) == 0 && len(names) > 0)

	// Watch the degraded view for 20 samples (2 s or more) before the
	// good check goes back.
	if err := integration.Poll(time.Minute, 100*time.Millisecond, func() error {
		if got := mon.samples(1); got < 20 {
			return fmt.Errorf("%d samples of the degraded view", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Push the good check back: it clears.
	clearedAt := time.Now()
	mon.phase(2)
	if err := r.Apply(ctx, good); err != nil {
		t.Fatal(err)
	}
	var clearedAfter time.Duration
	err = integration.Poll(2*time.Minute, 100*time.Millisecond, func() error {
		if err := viewState(ctx, r, target.Name, n, false); err != nil {
			return err
		}
		clearedAfter = time.Since(clearedAt)
		return nil
	})
	res.Add("good check pushed back → cleared on every server (all healthy, no flag)", "< 30 s", clearedAfter.Round(10*time.Millisecond).String(), err == nil && clearedAfter < 30*time.Second)
	if err != nil {
		res.Note("not cleared: %v", err)
	}
	restored, err := waitEvent(ctx, r, target.Name, ev.Seq, wire.EventHealthRestored)
	res.Add("event health_restored", "raised", eventValue(restored, err), err == nil)
	var after float64
	err = integration.Poll(15*time.Second, 100*time.Millisecond, func() error {
		for _, node := range r.Nodes() {
			v, err := node.Metric(ctx, "cairn_health_disregarded_services")
			if err != nil {
				return err
			}
			if after = v; v != 0 {
				return fmt.Errorf("%s: %v", node.ID, v)
			}
		}
		return nil
	})
	res.Add("cairn_health_disregarded_services after, every server", "0", fmt.Sprint(after), err == nil)

	low, lifecycles := mon.stop()
	floor := n - max(1, n*33/100)
	res.Add("fewest replicas served, bad check pushed → disregarded (node a's view)", fmt.Sprintf("≥ %d (the shrink cap's floor)", floor),
		fmt.Sprintf("%d of %d", low[0], n), low[0] >= floor)
	res.Add(fmt.Sprintf("fewest replicas served while disregarded (%d samples)", mon.samples(1)), fmt.Sprintf("%d (all)", n), fmt.Sprintf("%d of %d", low[1], n), low[1] == n)
	res.Add("fewest replicas served, good check pushed back → cleared", fmt.Sprintf("≥ %d (the shrink cap's floor)", floor),
		fmt.Sprintf("%d of %d", low[2], n), low[2] >= floor)
	res.Add("lifecycle changes (drained, terminated)", "none", fmt.Sprint(len(lifecycles)), len(lifecycles) == 0)
	for _, l := range lifecycles {
		res.Note("lifecycle change: %s", l)
	}
	if low[0] < n {
		res.Note("on the way in the view served %d of %d for a moment: probes are jittered, so the first replicas to reach withdraw_after are withdrawn (within the shrink cap, docs/health.md §3) before half have failed and the guard serves them all again", low[0], n)
	}
	if low[2] < n {
		res.Note("on the way back the guard lifts once half pass again; the replicas not yet re-admitted (admit_after 5, admit_min 10 s) leave the view within the shrink cap until they are")
	}
	res.Report(t)
}

// viewState checks service name's view on every live server: all n
// replicas served, ready, and either flagged health_disregarded
// (unhealthy) or all healthy with no flag.
func viewState(ctx context.Context, r *Region, name string, n int, disregarded bool) error {
	for _, node := range r.Cluster.Live() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		d, err := node.Client().Service(cctx, Namespace, name)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", node.ID, err)
		}
		if d.View.HealthDisregarded != disregarded {
			return fmt.Errorf("%s: view health_disregarded=%v; want %v", node.ID, d.View.HealthDisregarded, disregarded)
		}
		if len(d.View.Endpoints) != n {
			return fmt.Errorf("%s: %d endpoints; want %d", node.ID, len(d.View.Endpoints), n)
		}
		for _, e := range d.View.Endpoints {
			flagged := slices.Contains(e.Flags, "health_disregarded")
			switch {
			case !e.Eligible || e.Lifecycle != status.Ready:
				return fmt.Errorf("%s: %s %s eligible=%v; want every replica ready and served", node.ID, e.InstanceID, e.Lifecycle, e.Eligible)
			case disregarded && (!flagged || e.Verdict != status.Unhealthy):
				return fmt.Errorf("%s: %s %s flags %v; want unhealthy, flagged health_disregarded", node.ID, e.InstanceID, e.Verdict, e.Flags)
			case !disregarded && (flagged || e.Verdict != status.Healthy):
				return fmt.Errorf("%s: %s %s flags %v; want healthy, no flag", node.ID, e.InstanceID, e.Verdict, e.Flags)
			}
		}
	}
	return nil
}

// viewWatch polls a view until stopped: the fewest eligible endpoints
// seen in each of three phases, and every lifecycle other than ready.
type viewWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	cur    int    // the phase, 0-2
	low    [3]int // -1: no sample in the phase
	count  [3]int // samples in each phase
	lcs    []string
}

func watchView(ctx context.Context, r *Region, name string) *viewWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &viewWatch{cancel: cancel, done: make(chan struct{}), low: [3]int{-1, -1, -1}}
	node := r.Node("a")
	seen := map[string]bool{}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			w.mu.Lock()
			phase := w.cur
			w.mu.Unlock()
			cctx, c := context.WithTimeout(ctx, 3*time.Second)
			d, err := node.Client().Service(cctx, Namespace, name)
			c()
			if err == nil {
				el := 0
				w.mu.Lock()
				for _, e := range d.View.Endpoints {
					if e.Eligible {
						el++
					}
					if e.Lifecycle != status.Ready && !seen[e.InstanceID] {
						seen[e.InstanceID] = true
						w.lcs = append(w.lcs, fmt.Sprintf("%s %s", e.InstanceID, e.Lifecycle))
					}
				}
				if w.low[phase] < 0 || el < w.low[phase] {
					w.low[phase] = el
				}
				w.count[phase]++
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// phase starts phase p: later samples count towards it.
func (w *viewWatch) phase(p int) {
	w.mu.Lock()
	w.cur = p
	w.mu.Unlock()
}

// samples returns the number of samples taken in phase p.
func (w *viewWatch) samples(p int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count[p]
}

func (w *viewWatch) stop() (low [3]int, lifecycles []string) {
	w.cancel()
	<-w.done
	return w.low, w.lcs
}

// askA asks addr over TCP for service name's A records, with EDNS, and
// returns their number and the EDEs ("code text", joined).
func askA(ctx context.Context, addr, name string) (int, string, error) {
	m := new(dns.Msg)
	m.SetQuestion(name+"."+Namespace+".svc.cairn.internal.", dns.TypeA)
	m.SetEdns0(4096, false)
	c := &dns.Client{Net: "tcp", Timeout: 3 * time.Second}
	resp, _, err := c.ExchangeContext(ctx, m, addr)
	if err != nil {
		return 0, "", err
	}
	if resp.Rcode != dns.RcodeSuccess {
		return 0, "", fmt.Errorf("%s", dns.RcodeToString[resp.Rcode])
	}
	a := 0
	for _, rr := range resp.Answer {
		if _, ok := rr.(*dns.A); ok {
			a++
		}
	}
	var edes []string
	if opt := resp.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				edes = append(edes, fmt.Sprintf("%d %s", e.InfoCode, e.ExtraText))
			}
		}
	}
	return a, strings.Join(edes, "; "), nil
}

// waitEvent polls node a for an event of kind after seq.
func waitEvent(ctx context.Context, r *Region, name string, after uint64, kind wire.EventKind) (wire.Event, error) {
	var got wire.Event
	err := integration.Poll(30*time.Second, 200*time.Millisecond, func() error {
		evs, err := r.Node("a").Client().Events(ctx, Namespace, name, 1000)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Seq > after && e.Kind == kind {
				got = e
				return nil
			}
		}
		return fmt.Errorf("no %s event after seq %d among %d", kind, after, len(evs))
	})
	return got, err
}

func eventValue(e wire.Event, err error) string {
	if err != nil {
		return "none"
	}
	return fmt.Sprintf("seq %d: %s", e.Seq, e.Reason)
}

// alertRuleMetrics reads the alert rule file, collects the metric names
// its expressions use and returns those node's /metrics lacks.
func alertRuleMetrics(ctx context.Context, node *integration.Node) (missing, names []string, err error) {
	b, err := os.ReadFile(alertRules)
	if err != nil {
		return nil, nil, err
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
				For   string `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", alertRules, err)
	}
	// A metric name in a PromQL expression: cairn's all start with cairn_.
	metricName := regexp.MustCompile(`\bcairn_[a-z0-9_]+\b`)
	set := map[string]bool{}
	for _, g := range file.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || rule.Expr == "" {
				return nil, nil, fmt.Errorf("%s: group %s: a rule without alert or expr", alertRules, g.Name)
			}
			for _, m := range metricName.FindAllString(rule.Expr, -1) {
				set[m] = true
			}
		}
	}
	for m := range set {
		names = append(names, m)
	}
	sort.Strings(names)
	exported, err := exportedMetrics(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range names {
		if !exported[m] {
			missing = append(missing, m)
		}
	}
	return missing, names, nil
}

// exportedMetrics returns the sample names of node's /metrics.
func exportedMetrics(ctx context.Context, node *integration.Node) (map[string]bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, node.URL()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
	}
	return out, sc.Err()
}
