package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/integration/linearize"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/wire"
)

// dnsService is the service whose DNS answers the disk-full test asks
// for: a few instances that stay.
const dnsService = `namespace: shop
name: lin-dns
ports: [{name: http, number: 8080, protocol: tcp}]
capability: {readiness: none}
policy: {lease_ttl: 10m, slow_start: 1ms}
`

const dnsSvc = "lin-dns"

// tableFile is the status table file in a server's data dir
// (cmd.TableFile; not imported: this package links no server code).
const tableFile = "table.cairn"

// enospc is how the error reads in a server's log, and appendFailed how
// raft says a follower could not store what the leader sent.
const enospc, appendFailed = "no space left on device", "failed to append to logs"

// TestStoreFollowerDiskFull: a follower's data dir lives on a small ext4
// filesystem of its own (a loop-mounted image), which a filler file fills
// while the cluster takes the recorded clients' load and a writer's
// registrations. Until the follower's raft log meets ENOSPC and for a
// while after (6 s; 60 s at full size) the cluster goes on committing,
// through the leader and the other follower, at the rate it took before;
// every node answers DNS (the full one from what it has, marked stale,
// EDE 3, within staleBound of meeting ENOSPC: the leader's heartbeats
// still reach it, its replication does not); the full follower keeps
// running, and the status table file it keeps stays whole (its writes
// fail; the last good one stays). Killed (kill -9) and started again on
// the full disk, as a supervisor would, it answers DNS from that file
// (EDE 3, its status naming the file's revision, not caught up) within
// 10 s and keeps running. The filler removed, the follower catches up
// with no step taken: its applied index reaches the leader's within 15 s
// (raft's backoff towards a follower whose appends failed grows to about
// 10 s), and its answers are fresh again. Every acknowledged
// registration is on every node, and the history is linearizable.
func TestStoreFollowerDiskFull(t *testing.T) {
	start := time.Now()
	needProcesses(t)
	needLoopMount(t)
	before, full := sized(3*time.Second, 10*time.Second), sized(6*time.Second, 60*time.Second)
	c := StartCluster(t, 3)
	ctx := ctxT(t, 3*time.Minute+2*full)
	applyDefinition(ctx, t, c, linService)
	applyDefinition(ctx, t, c, dnsService)
	leader, err := c.WaitLeader(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// DNS is asked for a service of its own, of 3 instances: the
	// writer's service grows past what an SRV answer holds even over TCP
	// (some 1,000 records), and the clients' instances come and go.
	for i := range 3 {
		if _, err := leader.Client().Register(ctx, linNS, dnsSvc, registration(fmt.Sprintf("d-%d", i), i)); err != nil {
			t.Fatal(err)
		}
	}
	var f *Node // the follower whose disk fills: the last that is not leader
	for _, n := range c.Nodes {
		if n != leader {
			f = n
		}
	}
	mnt := moveToSmallDisk(t, f, 48<<20)

	rec := linearize.NewRecorder()
	cl := startLin(ctx, c, "", rec, 4)
	w := linWriter(ctx, c)
	if err := w.WaitAcks(ctx, func(a []Ack) bool { return len(a) >= 20 }); err != nil {
		t.Fatal(err)
	}
	srv := "_http._tcp." + dnsSvc + "." + linNS + ".svc." + dnsZone
	for _, n := range c.Nodes {
		Eventually(t, 20*time.Second, func() error { return answers(n, srv) })
	}
	// The table f keeps on disk (written at most every 5 s) holds both
	// services and the writer's first instances before the disk fills:
	// what f serves if it restarts while full.
	st, err := leaderStatus(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 20*time.Second, func() error {
		s, err := tablefile.Load(filepath.Join(f.DataDir, tableFile))
		if err != nil || s == nil || s.Revision < st.Revision {
			return fmt.Errorf("%s's table file holds revision %d (%v); want %d", f.ID, revisionOf(s), err, st.Revision)
		}
		return nil
	})
	watch := &phase{c: c, f: f, w: w, srv: srv}

	// Before: the rate the cluster takes writes at.
	pre := watch.run(t, before)

	// Fill the disk, and wait until the follower's raft log has met it:
	// bolt reuses the pages it freed before it needs new ones.
	filler := filepath.Join(mnt, "filler")
	filled, err := fill(filler)
	if err != nil {
		t.Fatalf("filling %s: %v", mnt, err)
	}
	filledAt := time.Now()
	t.Logf("filled %s with %d MB", mnt, filled>>20)
	var metAfter time.Duration
	Eventually(t, 30*time.Second, func() error {
		if !f.Running() {
			return &stopPolling{fmt.Errorf("%s exited on the full disk: %s\n%s", f.ID, f.state(), f.Tail(30))}
		}
		if logCount(t, f, appendFailed, enospc) == 0 {
			return fmt.Errorf("%s's raft log has not met %q yet", f.ID, enospc)
		}
		metAfter = time.Since(filledAt)
		return nil
	})
	t.Logf("%s met ENOSPC %s after the fill", f.ID, metAfter.Round(time.Millisecond))
	// Its replication stalled while the leader's heartbeats still reach
	// it: its answers turn stale (EDE 3) within --stale-after (5 s, the
	// harness's default) and the store's check of the leader's revision
	// (1 s, plus its answer) of meeting ENOSPC; the leader's stay fresh.
	metAt := time.Now()
	var staleAfter time.Duration
	err = Poll(staleBound, 100*time.Millisecond, func() error {
		stale, err := answersStale(f, srv)
		if err != nil || !stale {
			return fmt.Errorf("%s's answer is not stale (EDE 3): %v", f.ID, err)
		}
		staleAfter = time.Since(metAt)
		return nil
	})
	staleErr := err
	staleValue := staleAfter.Round(time.Millisecond).String()
	if err != nil {
		staleValue = err.Error()
	}
	t.Logf("%s's answers stale %s after it met ENOSPC", f.ID, staleValue)

	// Full: for a while the cluster must go on as before.
	during := watch.run(t, full)
	runningFull := f.Running()
	staleEnd, staleEndErr := answersStale(f, srv)
	leaderStale, leaderErr := true, error(nil)
	if l, err := c.Leader(); err != nil {
		leaderErr = err
	} else {
		leaderStale, leaderErr = answersStale(l, srv)
	}
	enospcLines := logCount(t, f, appendFailed, enospc)
	tableFull := tableRow(f.DataDir, "while full", logCount(t, f, keeperFailed))

	// The follower dies while the disk is full (kill -9) and is started
	// again, as a supervisor would: it must come up and answer DNS from
	// the table it kept, its raft log still full. (The harness's Restart
	// waits for addrs.json, which a full disk does not take: poll DNS.)
	if err := f.Kill(); err != nil {
		t.Fatal(err)
	}
	kept, err := tablefile.Load(filepath.Join(f.DataDir, tableFile))
	if err != nil || kept == nil {
		t.Fatalf("%s's table file before the restart: %v", f.ID, err)
	}
	restartedAt := time.Now()
	if err := f.spawn(); err != nil {
		t.Fatal(err)
	}
	// It answers from the table it kept: its DNS answers are stale (EDE
	// 3), and its status says the table it serves was built from the
	// kept one's store revision while its replica has not caught up.
	var answeredAfter time.Duration
	err = Poll(30*time.Second, 50*time.Millisecond, func() error {
		if !f.Running() {
			return &stopPolling{fmt.Errorf("%s exited: %s\n%s", f.ID, f.state(), f.Tail(30))}
		}
		stale, err := answersStale(f, srv)
		if err != nil {
			return err
		}
		if !stale {
			return &stopPolling{fmt.Errorf("%s, restarted on the full disk, answers without EDE 3", f.ID)}
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := f.Client().Status(sctx)
		if err != nil {
			return err
		}
		if st.TableRevision != kept.Revision || st.CaughtUp || !st.Stale {
			return &stopPolling{fmt.Errorf("%s, restarted on the full disk, serves a table of revision %d (kept: %d), caught up %t, stale %t",
				f.ID, st.TableRevision, kept.Revision, st.CaughtUp, st.Stale)}
		}
		answeredAfter = time.Since(restartedAt)
		return nil
	})
	restartErr := err
	restartValue := answeredAfter.Round(time.Millisecond).String()
	if err != nil {
		restartValue = err.Error()
	}
	t.Logf("%s restarted on the full disk: DNS answered after %s", f.ID, restartValue)
	again := watch.run(t, sized(2*time.Second, 10*time.Second))
	runningAgain := f.Running()

	// Free the space: the follower catches up by itself.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freedAt := time.Now()
	var target uint64
	Eventually(t, 10*time.Second, func() error {
		st, err := leaderStatus(ctx, c)
		target = st.Revision
		return err
	})
	var caughtUp time.Duration
	var lastSeen uint64
	err = Poll(60*time.Second, 50*time.Millisecond, func() error {
		if !f.Running() {
			return &stopPolling{fmt.Errorf("%s exited: %s", f.ID, f.state())}
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := f.Client().Status(sctx)
		if err != nil {
			return err
		}
		lastSeen = st.Revision
		if st.Revision < target {
			return fmt.Errorf("%s applied %d of the leader's %d", f.ID, st.Revision, target)
		}
		caughtUp = time.Since(freedAt)
		return nil
	})
	caughtErr := err
	caughtValue := caughtUp.Round(time.Millisecond).String()
	if err != nil {
		caughtValue = fmt.Sprintf("not in 60 s (%d of %d)", lastSeen, target)
	}
	t.Logf("%s caught up %s after the space was freed", f.ID, caughtValue)
	// Caught up, it answers fresh again (no EDE 3).
	freshErr := Poll(staleBound, 100*time.Millisecond, func() error {
		stale, err := answersStale(f, srv)
		if err != nil || stale {
			return fmt.Errorf("%s's answer after catching up: stale %t, %v", f.ID, stale, err)
		}
		return nil
	})
	freshValue := "yes"
	if freshErr != nil {
		freshValue = freshErr.Error()
	}

	n := len(w.Acks())
	if err := w.WaitAcks(ctx, func(a []Ack) bool { return len(a) >= n+20 }); err != nil {
		t.Fatalf("after freeing the space: %v", err)
	}
	stopLoad(t, cl, w)
	table := tableRow(f.DataDir, "after", logCount(t, f, keeperFailed))
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load average %s", strings.TrimSpace(string(load)))

	rows := []row{
		{fmt.Sprintf("%s's raft log met ENOSPC after the fill", f.ID), "< 30s", fmt.Sprintf("%s (%d log lines saying so by the end)", metAfter.Round(time.Millisecond), enospcLines), true},
		{fmt.Sprintf("%s still runs after %s full", f.ID, full), "yes", yesNo(runningFull), runningFull},
		{"writes acknowledged a second, before the fill", "-", pre.rateString(), true},
		{"writes acknowledged a second, disk full", ">= half of before", during.rateString(), during.rate() >= pre.rate()/2},
		{fmt.Sprintf("of them through the leader and the other follower (not %s)", f.ID), "> 0", fmt.Sprint(during.others), during.others > 0},
		{fmt.Sprintf("%s's applied index behind the leader's while full, most", f.ID), "-", fmt.Sprint(during.maxLag), true},
	}
	rows = append(rows,
		row{fmt.Sprintf("%s's DNS answers stale (EDE 3) after it met ENOSPC", f.ID), "< " + staleBound.String(), staleValue, staleErr == nil},
		row{fmt.Sprintf("%s's still stale at the end of the full phase, the leader's fresh", f.ID), "yes, yes",
			fmt.Sprintf("%s (%v), %s (%v)", yesNo(staleEnd), staleEndErr, yesNo(!leaderStale), leaderErr),
			staleEnd && staleEndErr == nil && !leaderStale && leaderErr == nil},
	)
	for _, n := range c.Nodes {
		rows = append(rows, row{fmt.Sprintf("DNS queries %s left unanswered while full", n.ID), "0",
			fmt.Sprintf("%d of %d", during.dnsMissed[n.ID], during.dnsAsked), during.dnsMissed[n.ID] == 0})
	}
	rows = append(rows,
		tableFull,
		row{fmt.Sprintf("%s killed and started again on the full disk: answers DNS from the kept table (EDE 3, revision %d) after", f.ID, kept.Revision), "< 10s", restartValue,
			restartErr == nil && answeredAfter < 10*time.Second},
		row{fmt.Sprintf("%s still runs %s after that, DNS queries unanswered on any node", f.ID, again.took.Round(time.Second)), "yes, 0",
			fmt.Sprintf("%s, %d of %d", yesNo(runningAgain), again.missed(), again.dnsAsked*len(c.Nodes)), runningAgain && again.missed() == 0},
		row{"writes acknowledged a second, after the restart", ">= half of before", again.rateString(), again.rate() >= pre.rate()/2},
		row{fmt.Sprintf("%s caught up with the leader after the space was freed", f.ID), "< 15s", caughtValue, caughtErr == nil && caughtUp < 15*time.Second},
		row{fmt.Sprintf("%s's DNS answers fresh (no EDE 3) after catching up", f.ID), "within " + staleBound.String(), freshValue, freshErr == nil},
		table,
		ackedOnEveryNode(ctx, t, c, w),
		historyRow(t, rec),
	)
	report(t, "store-follower-disk-full", fmt.Sprintf("follower %s's disk full for %s", f.ID, full), start, rows)
}

// staleBound is how soon a follower whose replication stalled answers
// stale: --stale-after (5 s, the servers' default, which the harness
// keeps) and the store's check of the leader's revision (every second,
// answered within one), with 2 s to spare on a loaded box.
const staleBound = 5*time.Second + 2*time.Second + 2*time.Second

// answersStale asks n's DNS for name and reports whether the answer, with
// records, carries EDE 3 (Stale Answer).
func answersStale(n *Node, name string) (bool, error) {
	r, err := exchange("tcp", n.DNSAddr, name, dns.TypeSRV, false)
	if err != nil {
		return false, err
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return false, fmt.Errorf("%s answers %s with %s and %d records", n.ID, name, dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	return slices.Contains(edeCodes(r), dns.ExtendedErrorCodeStaleAnswer), nil
}

// needLoopMount skips a test that mounts a filesystem image unless it
// runs as root on Linux with mkfs.ext4 and mount; under CI=true it fails
// instead.
func needLoopMount(t *testing.T) {
	t.Helper()
	missing := func(why string) { t.Helper(); Missing(t, "a small disk of its own", why) }
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		missing("needs root on Linux to mount an image")
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool + " is not installed (e2fsprogs, mount)")
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		missing("no loop devices (/dev/loop-control): " + err.Error())
	}
}

// moveToSmallDisk stops n, moves its data dir onto an ext4 filesystem of
// size bytes of its own (an image in a temp dir, loop-mounted, no blocks
// reserved for root: the server runs as root here), restarts n on it and
// returns the mount point. The filesystem is unmounted when the test
// ends, after n is killed.
func moveToSmallDisk(t *testing.T, n *Node, size int64) string {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("mkfs.ext4", "-q", "-F", "-m", "0", img); err != nil {
		t.Fatal(err)
	}
	if err := run("mount", "-o", "loop", img, mnt); err != nil {
		if strings.Contains(err.Error(), "ermission denied") || strings.Contains(err.Error(), "not permitted") {
			Missing(t, "a small disk of its own", "this machine refuses the mount: "+err.Error())
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n.Running() {
			n.Kill()
		}
		if err := run("umount", mnt); err != nil {
			t.Errorf("unmounting %s: %v; detaching it lazily", mnt, err)
			_ = run("umount", "-l", mnt)
		}
	})
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(mnt, "data")
	if err := run("cp", "-a", n.DataDir, data); err != nil {
		t.Fatal(err)
	}
	n.DataDir = data
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	return mnt
}

// fill writes zeros to path until the filesystem is full, and returns
// how many bytes it took.
func fill(path string) (int64, error) {
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		m, err := fh.Write(buf)
		n += int64(m)
		if errors.Is(err, syscall.ENOSPC) {
			// The last blocks, to the byte.
			for size := len(buf) / 2; size > 0; size /= 2 {
				for {
					m, err := fh.Write(buf[:size])
					n += int64(m)
					if err != nil {
						break
					}
				}
			}
			return n, fh.Sync()
		}
		if err != nil {
			return n, err
		}
	}
}

// logCount is how many lines of n's log (all its runs) hold every one
// of ss.
func logCount(t *testing.T, n *Node, ss ...string) int {
	t.Helper()
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
lines:
	for line := range strings.Lines(string(b)) {
		for _, s := range ss {
			if !strings.Contains(line, s) {
				continue lines
			}
		}
		count++
	}
	return count
}

// leaderStatus is the status of the node that is leader.
func leaderStatus(ctx context.Context, c *Cluster) (wire.Status, error) {
	l, err := c.Leader()
	if err != nil {
		return wire.Status{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return l.Client().Status(ctx)
}

// tableRow reads the status table file on the full disk back: whole
// (header, length and checksum right), and no temporary file left.
func tableRow(dataDir, when string, failures int) row {
	s, err := tablefile.Load(filepath.Join(dataDir, tableFile))
	temps, _ := filepath.Glob(filepath.Join(dataDir, "."+tableFile+"*"))
	value := fmt.Sprintf("whole (store revision %d); %d failed writes logged; %d temporary files left", revisionOf(s), failures, len(temps))
	switch {
	case err != nil:
		value = err.Error()
	case s == nil:
		value = "missing"
	}
	return row{"status table file on the small disk, " + when, "whole, no temporary file", value, err == nil && s != nil && len(temps) == 0}
}

// keeperFailed is how a server logs a failed write of its table file.
const keeperFailed = "keeping the status table on disk"

func revisionOf(s *tablefile.Snapshot) uint64 {
	if s == nil {
		return 0
	}
	return s.Revision
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// phase watches the cluster for a while: it asks every node's DNS every
// 250ms, follows how far the full follower is behind the leader, and
// counts the writer's acknowledgements.
type phase struct {
	c   *Cluster
	f   *Node
	w   *Writer
	srv string
}

// phaseResult is what a phase saw.
type phaseResult struct {
	acks, others int // acknowledged; of them, not through f
	took         time.Duration
	dnsAsked     int
	dnsMissed    map[string]int
	maxLag       uint64
}

// missed is the DNS queries left unanswered, every node's.
func (r phaseResult) missed() int {
	n := 0
	for _, m := range r.dnsMissed {
		n += m
	}
	return n
}

func (r phaseResult) rate() float64 { return float64(r.acks) / r.took.Seconds() }

func (r phaseResult) rateString() string {
	return fmt.Sprintf("%.1f (%d in %s)", r.rate(), r.acks, r.took.Round(time.Millisecond))
}

// run watches for d.
func (p *phase) run(t *testing.T, d time.Duration) phaseResult {
	t.Helper()
	res := phaseResult{dnsMissed: map[string]int{}}
	start := time.Now()
	first := len(p.w.Acks())
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < d {
		res.dnsAsked++
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, n := range p.c.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := answers(n, p.srv); err != nil {
					mu.Lock()
					res.dnsMissed[n.ID]++
					mu.Unlock()
					t.Logf("DNS on %s: %v", n.ID, err)
				}
			}()
		}
		wg.Wait()
		if lag, ok := p.lag(t); ok {
			res.maxLag = max(res.maxLag, lag)
		}
		<-tick.C // the cadence of the checks, not a wait for a condition
	}
	res.took = time.Since(start)
	for _, a := range p.w.Acks()[first:] {
		res.acks++
		if a.Via != p.f.ID {
			res.others++
		}
	}
	return res
}

// lag is how many entries f has applied fewer than the leader.
func (p *phase) lag(t *testing.T) (uint64, bool) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	l, err := leaderStatus(ctx, p.c)
	if err != nil {
		return 0, false
	}
	s, err := p.f.Client().Status(ctx)
	if err != nil || s.Revision >= l.Revision {
		return 0, err == nil
	}
	return l.Revision - s.Revision, true
}
