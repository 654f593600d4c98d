package integration

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/cmd"
	"github.com/cairn-sd/cairn/wire"
)

// EnvEnvoyOutage sets how long cairn is down in
// TestEnvoyRidesOutControlPlaneOutage: 10s by default (make test);
// make scenarios runs it with 60s.
const EnvEnvoyOutage = "CAIRN_ENVOY_OUTAGE"

// envoyReconnectBound is how long an Envoy may take to be connected
// again once the restarted server is ready. Envoy retries its ADS stream
// with a jittered exponential backoff from 500 ms, capped at 30 s (its
// defaults; the bootstrap sets no retry policy), so its next try comes
// at most 30 s after the server is back; cairn admits at least 50 new
// streams per 10 s after a restart (SPEC §4), so that try, one of two
// streams, is admitted. 30 s, and 30 s more for a noisy shared machine:
// only a server refusing or ignoring the Envoys breaks it.
const envoyReconnectBound = time.Minute

// envoyOutage returns the outage length $CAIRN_ENVOY_OUTAGE asks for.
func envoyOutage(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv(EnvEnvoyOutage)
	if s == "" {
		return 10 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second || d > 10*time.Minute {
		t.Fatalf("$%s=%q: want a duration from 1s to 10m, e.g. 60s", EnvEnvoyOutage, s)
	}
	return d
}

// TestEnvoyRidesOutControlPlaneOutage: a one-node cairn (its data dir
// kept across the restart), four upstreams of the demo service, and two
// real Envoys from the shipped bootstrap, one over delta ADS, one over
// state of the world, with requests through both every 20 ms from before
// the outage until after they are back.
//
// cairn is killed (SIGKILL) for $CAIRN_ENVOY_OUTAGE (10 s; 60 s under
// make scenarios): both Envoys keep routing on their last view, every
// request answered 200 by an upstream, each upstream taking its share.
// The kill lands between two writes of the table the server keeps on
// disk: the one it finds when it restarts is older than the Envoys'
// view, three upstreams in rotation where they hold four. cairn is
// restarted: both Envoys are connected again (control_plane.
// connected_state 1) within envoyReconnectBound of it being ready, and
// hold the same four hosts, healthy; a fifth upstream registered then
// reaches both, from a later revision. Sampled every 100 ms through the
// whole test, the store revision in the assignment version each Envoy
// holds never goes down, and from the fourth upstream's admission until
// the fifth's neither Envoy holds any other set of hosts: nothing from
// the older table reaches them.
func TestEnvoyRidesOutControlPlaneOutage(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	outage := envoyOutage(t)
	c := StartCluster(t, 1, "--allow-loopback-endpoints")
	srv := c.Nodes[0]
	ctx := ctxT(t, outage+5*time.Minute)
	applyDefinition(ctx, t, c, demoDefinition(t))
	all := newUpstreams(t, "web", 5)
	us, fifth := all[:4], all[4]
	// Leases far longer than the test: the upstreams are registered once
	// and never renewed, and what expires a lease across a control-plane
	// outage is TestQuorumLossExpiresNoLease's subject, not this one's.
	longLease := func(r *wire.Registration) { r.LeaseTTL = wire.Duration(time.Hour) }
	registerUpstreams(ctx, t, c, us[:3], nil, longLease)

	envoys := []*Envoy{
		startEnvoy(t, c, EnvoyConfig{Node: "envoy-delta"}),
		startEnvoy(t, c, EnvoyConfig{Node: "envoy-sotw", SotW: true}),
	}
	watches := make([]*assignmentWatch, len(envoys))
	for i, e := range envoys {
		waitHosts(t, e, time.Minute, "the first three", hostsAre("HEALTHY", us[:3]...))
		watches[i] = watchAssignment(t, e)
	}
	tr := driveEnvoys(t, envoys, 20*time.Millisecond, outage+envoyReconnectBound+4*time.Minute)

	// The table kept on disk with the first three in rotation; then the
	// fourth upstream, in both Envoys from a later store revision.
	tablePath := filepath.Join(srv.DataDir, cmd.TableFile)
	early, earlyRev := keptTableWith(t, tablePath, 3, 30*time.Second)
	registerUpstreams(ctx, t, c, us[3:], nil, longLease)
	var before []map[string]string // per Envoy: address → health
	for i, e := range envoys {
		hs := waitHosts(t, e, time.Minute, "before the outage", hostsAre("HEALTHY", us...))
		before = append(before, hostHealth(hs))
		watches[i].expect(hostsAre("", us...))
	}

	// The outage. The kill lands between two writes of the kept table
	// (the server writes it at most every 5 s): the restarted server
	// finds the older one on disk.
	killRevs := make([]uint64, len(envoys))
	for i, e := range envoys {
		v, err := e.AssignmentVersion(ctx, demoCluster)
		if err != nil {
			t.Fatal(err)
		}
		if killRevs[i], err = versionRevision(v); err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		if killRevs[i] <= earlyRev {
			t.Fatalf("%s holds version %s with four hosts; the kept table with three is at revision %d", e.name, v, earlyRev)
		}
	}
	tr.phase("outage")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := os.WriteFile(tablePath, early, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("cairn killed; the Envoys hold revisions %v; the table kept on disk is at %d", killRevs, earlyRev)
	for _, e := range envoys {
		waitConnected(t, e, 0, 30*time.Second, "after cairn was killed")
	}
	// The outage lasts a fixed time (it is the scenario, not a wait for
	// a condition); every 500 ms the answers so far are checked, to stop
	// at the first one that was not an upstream's 200 (the watches check
	// the hosts).
	tick := time.NewTicker(500 * time.Millisecond)
	for time.Since(killed) < outage {
		if bad := tr.firstBad(); bad != "" {
			t.Fatalf("during the outage: %s", bad)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	tick.Stop()
	outageAnswers := tr.byEnvoy()

	// The restart.
	tr.phase("restart")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	t.Logf("cairn ready again after an outage of %s", ready.Sub(killed).Round(time.Millisecond))
	tr.phase("reconnect")
	for _, e := range envoys {
		waitConnected(t, e, 1, envoyReconnectBound, "after cairn was restarted")
		t.Logf("%s connected again %s after cairn was ready (a second of samples at 1 included)", e.name, time.Since(ready).Round(time.Millisecond))
	}
	// The same hosts, as healthy as before.
	for i, e := range envoys {
		hs := waitHosts(t, e, time.Minute, "after the restart", hostsAre("HEALTHY", us...))
		if got := hostHealth(hs); !maps.Equal(got, before[i]) {
			t.Errorf("%s holds %v after the restart; before the outage %v", e.name, got, before[i])
		}
	}
	// And the restarted server keeps them current: a fifth upstream
	// reaches both, from a revision past the one they held.
	for _, w := range watches {
		w.expect(nil)
	}
	registerUpstreams(ctx, t, c, []*upstream{fifth}, nil, longLease)
	for i, e := range envoys {
		waitHosts(t, e, time.Minute, "the fifth upstream, after the restart", hostsAre("HEALTHY", all...))
		v, err := e.AssignmentVersion(ctx, demoCluster)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := versionRevision(v); err != nil || r <= killRevs[i] {
			t.Errorf("%s holds version %q with the fifth upstream (%v); want a revision past %d", e.name, v, err, killRevs[i])
		}
	}
	tr.phase("after")
	for _, e := range envoys {
		by, own, err := spread(ctx, e, 30)
		if err != nil {
			t.Fatal(err)
		}
		// The first four in rotation; the fourth's weight may still be
		// rising (slow start, 30 s), the fifth's starts at 10%.
		for _, u := range us {
			if by[u.ID] == 0 {
				t.Errorf("%s after the restart: %s answered none of 30 (all: %v; Envoy itself: %v)", e.name, u.ID, by, own)
			}
		}
	}
	tr.stop()
	for _, w := range watches {
		w.stop()
	}

	for i, e := range envoys {
		w := watches[i]
		w.mu.Lock()
		t.Logf("%s: %d samples, versions held in turn %v", e.name, w.samples, w.seen)
		if w.samples < 10 {
			t.Errorf("%s: %d samples of its assignment version; the watch did not run", e.name, w.samples)
		}
		for _, p := range w.problems {
			t.Errorf("%s: %s", e.name, p)
		}
		w.mu.Unlock()
		noRejectedUpdates(ctx, t, e)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, b := range tr.bad {
		t.Error(b)
	}
	for i, e := range envoys {
		got := outageAnswers[i]
		t.Logf("%s: %d requests answered during the outage %v; %d in all", e.name, answered(got), got, tr.total[i])
		for _, u := range us {
			if got[u.ID] == 0 {
				t.Errorf("%s: no request reached %s during the outage (%v); its last view holds all four", e.name, u.ID, got)
			}
		}
	}
}

// waitConnected polls e until its control_plane.connected_state is
// want: for 1, in every sample for a second. Envoy sets it to 1 when it
// opens a stream, before the connection under it is up, and back to 0
// when that fails: a refused or failed attempt shows 1 for a moment.
func waitConnected(t *testing.T, e *Envoy, want int64, timeout time.Duration, what string) {
	t.Helper()
	var since time.Time // of the run of samples at 1
	err := Poll(timeout, 50*time.Millisecond, func() error {
		v, ok, err := e.Stat(context.Background(), "control_plane.connected_state")
		if err != nil {
			return err
		}
		if !ok || v != want {
			since = time.Time{}
			return fmt.Errorf("control_plane.connected_state %d (present: %v), want %d", v, ok, want)
		}
		if want == 1 {
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) < time.Second {
				return fmt.Errorf("control_plane.connected_state 1 for %s, want a second", time.Since(since).Round(time.Millisecond))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s %s: %v", e.name, what, err)
	}
}

func hostHealth(hs []EnvoyHost) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Addr] = h.Health
	}
	return m
}

// answered returns how many requests the upstreams of m answered in all.
func answered(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// versionRevision returns the store revision a version Envoy holds
// carries: cairn's versions are "<revision>-<digest>" (a state-of-the-
// world version_info), and a delta response's system_version_info is
// the revision alone (xdsserver/version.go).
func versionRevision(v string) (uint64, error) {
	head, _, _ := strings.Cut(v, "-")
	r, err := strconv.ParseUint(head, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("version %q carries no store revision", v)
	}
	return r, nil
}

// assignmentWatch samples, every 100 ms until stopped, the assignment
// version an Envoy holds of the demo cluster and the hosts it holds,
// and notes every sample where the revision went down, the version was
// lost, or the hosts were not the upstreams'.
type assignmentWatch struct {
	e      *Envoy
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	samples  int
	want     func([]EnvoyHost) error // nil: the hosts are not checked
	last     string
	lastRev  uint64
	seen     []string // the versions held, in turn
	problems []string
}

func watchAssignment(t *testing.T, e *Envoy) *assignmentWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &assignmentWatch{e: e, cancel: cancel, done: make(chan struct{})}
	w.sample(ctx) // the first sample before the test goes on
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				w.sample(ctx)
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

// expect has every later sample check the hosts with want.
func (w *assignmentWatch) expect(want func([]EnvoyHost) error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want = want
}

func (w *assignmentWatch) sample(ctx context.Context) {
	v, err := w.e.AssignmentVersion(ctx, demoCluster)
	if err != nil {
		return // Envoy's admin interface is busy: no sample
	}
	hs, err := w.e.Hosts(ctx, demoCluster)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	at := time.Now().UTC().Format("15:04:05.000")
	if w.want != nil {
		if err := w.want(hs); err != nil {
			w.problems = append(w.problems, fmt.Sprintf("%s: holds %s: %v", at, hostLines(hs), err))
		}
	}
	if v == w.last {
		return
	}
	if v == "" {
		w.problems = append(w.problems, fmt.Sprintf("%s: lost its assignment version (was %q)", at, w.last))
		w.last = v
		return
	}
	r, err := versionRevision(v)
	if err != nil {
		w.problems = append(w.problems, at+": "+err.Error())
		return
	}
	if r < w.lastRev {
		w.problems = append(w.problems, fmt.Sprintf("%s: holds version %q, older than the %q it held", at, v, w.last))
	}
	w.last, w.lastRev = v, max(r, w.lastRev)
	w.seen = append(w.seen, v)
}

func (w *assignmentWatch) stop() {
	w.cancel()
	<-w.done
}

// envoyTraffic sends a request through each Envoy every interval, until
// stopped or for at most limit, and notes every answer that is not a 200
// from an upstream, with the phase of the test it came in.
type envoyTraffic struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	now   string
	by    []map[string]int // per Envoy, in the current phase: upstream → answers
	total []int
	bad   []string
}

func driveEnvoys(t *testing.T, envoys []*Envoy, interval, limit time.Duration) *envoyTraffic {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	tr := &envoyTraffic{cancel: cancel, now: "before", total: make([]int, len(envoys))}
	for range envoys {
		tr.by = append(tr.by, map[string]int{})
	}
	for i, e := range envoys {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				code, who, err := get(rctx, e)
				rcancel()
				if ctx.Err() != nil {
					return // stopped: a request cut short is not Envoy's
				}
				tr.mu.Lock()
				tr.total[i]++
				if err != nil || code != http.StatusOK || who == "" {
					tr.bad = append(tr.bad, fmt.Sprintf("%s %s, %s: status %d from %q, error %v",
						time.Now().UTC().Format("15:04:05.000"), e.name, tr.now, code, cmp.Or(who, "Envoy itself"), err))
				} else {
					tr.by[i][who]++
				}
				tr.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	t.Cleanup(tr.stop)
	return tr
}

// firstBad returns the first answer noted that was not an upstream's
// 200, or "".
func (tr *envoyTraffic) firstBad() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.bad) == 0 {
		return ""
	}
	return tr.bad[0]
}

// phase names what the test does from now on, and starts new counts.
func (tr *envoyTraffic) phase(name string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.now = name
	for i := range tr.by {
		tr.by[i] = map[string]int{}
	}
}

// byEnvoy returns the answers counted per Envoy in the current phase.
func (tr *envoyTraffic) byEnvoy() []map[string]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]map[string]int, len(tr.by))
	for i, m := range tr.by {
		out[i] = maps.Clone(m)
	}
	return out
}

func (tr *envoyTraffic) stop() {
	tr.cancel()
	tr.wg.Wait()
}
