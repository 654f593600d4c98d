package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/wire"
)

// steady waits until the writer has been getting through for d: for the
// acknowledgement of a write sent from now on, then for that of one sent
// at least d later.
func steady(ctx context.Context, w *integration.Writer, d time.Duration) error {
	first, err := w.FirstAckAfter(ctx, time.Now())
	if err != nil {
		return err
	}
	_, err = w.FirstAckAfter(ctx, first.Sent.Add(d))
	return err
}

// The raft and store log messages a failover is read from (raft v1.7.3's
// wording; the store's "leader ready").
const (
	msgDetect      = `msg="heartbeat timeout reached, starting election"`
	msgWon         = `msg="election won"`
	msgReady       = `msg="leader ready"`
	msgPreVoteLost = `msg="pre-vote campaign failed, waiting for election timeout"`
	msgRetry       = `msg="Election timeout reached, restarting election"`
	msgStepDown    = `msg="failed to contact quorum of nodes, stepping down"`
	msgNoContact   = `msg="failed to contact"`
)

// phases is one failover split at what the survivors logged, each a time
// since the kill (0: not seen).
type phases struct {
	detectFirst, detectBoth time.Duration // the survivors' heartbeat timeouts
	won, ready              time.Duration // election won; the new leader ready
	firstWrite              time.Duration
	retries                 int // pre-votes lost and elections restarted
	viaLeader               bool
}

// failover kills the leader of a 3-node cluster o.failoverRuns times
// under a steady write load, and restarts it each time, while DNS
// queries go to the live nodes.
func failover(ctx context.Context, o options, bin, dir string) error {
	c, _, err := startCluster(ctx, o, bin, dir, 3)
	if err != nil {
		return err
	}
	defer c.Close()
	// The writer registers instances f-0000000, f-0000001, ... to the
	// nodes in turn, moving on to the next on 503 or no answer.
	w := integration.StartWriter(ctx, c, integration.WriterConfig{
		Namespace: benchNS,
		Service:   benchSvc,
		Rate:      o.failoverRate,
		Registration: func(i int) wire.Registration {
			return wire.Registration{
				ID:        fmt.Sprintf("f-%07d", i),
				Addresses: []string{fmt.Sprintf("10.200.%d.%d", (i/250)%250, i%250+1)},
				Ports:     map[string]int{"http": 8080},
			}
		},
	})
	defer w.Stop()
	if err := steady(ctx, w, o.failoverSteady); err != nil {
		return err
	}
	// A node serves the table it kept on disk until it has caught up
	// after a restart; the keeper writes it every 5 s at most. Kill no
	// node before every node keeps a table naming the bench's service,
	// or its restart would answer NXDOMAIN for a name created seconds
	// before (not what this bench measures).
	err = integration.Poll(30*time.Second, 100*time.Millisecond, func() error {
		for _, n := range c.Nodes {
			b, err := os.ReadFile(filepath.Join(n.DataDir, "table.cairn"))
			if err != nil || !bytes.Contains(b, []byte(`"`+benchNS+"/"+benchSvc+`"`)) {
				return fmt.Errorf("%s keeps no table naming %s/%s yet", n.ID, benchNS, benchSvc)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	logs := newLogReader(c)
	if o.failoverRuns == 0 {
		return calm(ctx, o, c, w, logs)
	}
	probe := newDNSProber(c.Nodes, benchSvc+"."+benchNS+".svc.cairn.internal.")
	stopDNS := probe.run(ctx, o.dnsRate)
	defer stopDNS()

	var times, catchUps []time.Duration
	var split []phases
	var log []string
	for run := 1; run <= o.failoverRuns; run++ {
		leader, err := c.WaitLeader(30 * time.Second)
		if err != nil {
			return err
		}
		// Steady state before the kill: the writer gets through for
		// -failover-steady (and at least one write).
		if err := steady(ctx, w, o.failoverSteady); err != nil {
			return fmt.Errorf("run %d, before the kill: %w", run, err)
		}
		logs.skip() // what was logged before this run
		probe.setDown(leader.Index-1, true)
		killedAt := time.Now()
		if err := leader.Kill(); err != nil {
			return err
		}
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		first, err := w.FirstAckAfter(rctx, killedAt)
		rcancel()
		if err != nil {
			return fmt.Errorf("run %d: no write accepted within 30 s of killing %s: %w\n%s", run, leader.ID, err, c.Logs(40))
		}
		d := first.Acked.Sub(killedAt)
		times = append(times, d)

		// Restart the killed node and time how long it takes to reach the
		// revision the leader had when it was ready.
		restartAt := time.Now()
		if err := leader.Restart(); err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
		probe.setDown(leader.Index-1, false)
		newLeader, err := c.WaitLeader(30 * time.Second)
		if err != nil {
			return err
		}
		target, err := revision(ctx, newLeader.Client())
		if err != nil {
			return err
		}
		err = integration.Poll(30*time.Second, 20*time.Millisecond, func() error {
			rev, err := revision(ctx, leader.Client())
			if err == nil && rev < target {
				err = fmt.Errorf("%s at revision %d; the leader was at %d", leader.ID, rev, target)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
		catchUps = append(catchUps, time.Since(restartAt))
		// By now the survivors have logged the whole failover.
		p, err := logs.phases(leader, killedAt)
		if err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
		p.firstWrite, p.viaLeader = d, first.Via == newLeader.ID
		split = append(split, p)
		log = append(log, fmt.Sprintf("%s %s", leader.ID, ms(d)))
	}
	dnsRes := stopDNS()
	if err := w.Err(); err != nil {
		return err
	}
	acked := len(w.Acks())
	under := 0
	for _, d := range times {
		if d < time.Second {
			under++
		}
	}
	fmt.Printf("| cairn leader failover, 3 nodes, kill -9 → first accepted write, %d runs | p50 %s, p90 %s, p99 %s, max %s | %d of %d under 1 s (percentiles nearest-rank: with 60 runs p99 is the max); writer offering %d writes/s to the nodes in turn, %d acknowledged, %s steady before each kill; per run (killed node, time): %s |\n",
		len(times), ms(pct(times, 50)), ms(pct(times, 90)), ms(pct(times, 99)), ms(pct(times, 100)), under, len(times), o.failoverRate, acked, o.failoverSteady, strings.Join(log, ", "))
	printPhases(split)
	fmt.Printf("| DNS during the failover runs, to the live nodes | %d of %d answered | %s |\n", dnsRes.ok, dnsRes.sent, dnsRes.details())
	fmt.Printf("| cairn restarted node, restart → at the leader's revision, %d runs | median %s, max %s | includes process start and /readyz |\n",
		len(catchUps), ms(pct(catchUps, 50)), ms(pct(catchUps, 100)))
	if o.calm > 0 {
		return calm(ctx, o, c, w, logs)
	}
	return nil
}

// printPhases prints where the failover time went, as percentiles over
// the runs of each phase's end (since the kill) and of each phase.
func printPhases(split []phases) {
	col := func(f func(p phases) (time.Duration, bool)) string {
		var ds []time.Duration
		for _, p := range split {
			if d, ok := f(p); ok {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			return "not seen"
		}
		return fmt.Sprintf("%s / %s / %s (%d runs)", ms(pct(ds, 50)), ms(pct(ds, 99)), ms(pct(ds, 100)), len(ds))
	}
	seen := func(d time.Duration) (time.Duration, bool) { return d, d > 0 }
	retried, viaLeader := 0, 0
	for _, p := range split {
		if p.retries > 0 {
			retried++
		}
		if p.viaLeader {
			viaLeader++
		}
	}
	fmt.Printf("| failover phases, p50 / p99 / max since the kill | first survivor's heartbeat timeout %s; both survivors' %s; election won %s; first write accepted %s; new leader ready (takeover committed) %s | "+
		"each phase: both timed out → won %s; won → first write %s; %d of %d runs lost a pre-vote or restarted an election; the first write went straight to the new leader in %d runs, through a follower's forwarding in the others; times from the survivors' logs (ms) |\n",
		col(func(p phases) (time.Duration, bool) { return seen(p.detectFirst) }),
		col(func(p phases) (time.Duration, bool) { return seen(p.detectBoth) }),
		col(func(p phases) (time.Duration, bool) { return seen(p.won) }),
		col(func(p phases) (time.Duration, bool) { return p.firstWrite, true }),
		col(func(p phases) (time.Duration, bool) { return seen(p.ready) }),
		col(func(p phases) (time.Duration, bool) { return p.won - p.detectBoth, p.won > 0 && p.detectBoth > 0 }),
		col(func(p phases) (time.Duration, bool) { return p.firstWrite - p.won, p.won > 0 }),
		retried, len(split), viaLeader)
}

// calm keeps the cluster up for o.calm under the writer, DNS queries at
// o.calmDNSRate and o.calmHogs busy loops, and counts what raft logged:
// every election there is one nobody caused.
func calm(ctx context.Context, o options, c *integration.Cluster, w *integration.Writer, logs *logReader) error {
	logs.skip()
	retries := w.Retries()
	probe := newDNSProber(c.Nodes, benchSvc+"."+benchNS+".svc.cairn.internal.")
	stopDNS := probe.run(ctx, o.calmDNSRate)
	hogs, err := startHogs(o.calmHogs, o.calm)
	if err != nil {
		stopDNS()
		return err
	}
	load, _ := os.ReadFile("/proc/loadavg")
	select {
	case <-ctx.Done():
	case <-time.After(o.calm):
	}
	stopHogs(hogs)
	dnsRes := stopDNS()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	n, err := logs.count(msgDetect, msgStepDown, msgWon, msgNoContact)
	if err != nil {
		return err
	}
	fmt.Printf("| elections nobody caused, 3 nodes up for %s, %d busy loops, writer at %d writes/s, DNS at %d queries/s | %d elections won, %d leader step-downs | %d follower heartbeat timeouts, %d leader warnings \"failed to contact\" a follower; %d writes retried; DNS %d of %d answered (%s); load average at the start: %s |\n",
		o.calm, o.calmHogs, o.failoverRate, o.calmDNSRate, n[msgWon], n[msgStepDown], n[msgDetect], n[msgNoContact], w.Retries()-retries, dnsRes.ok, dnsRes.sent, dnsRes.details(), strings.TrimSpace(string(load)))
	return nil
}

// revision returns the node's applied store revision.
func revision(ctx context.Context, cl *client.Client) (uint64, error) {
	d, err := cl.Service(ctx, benchNS, benchSvc)
	return d.View.Revision, err
}

// logReader reads the nodes' logs from where it last stopped.
type logReader struct {
	nodes []*integration.Node
	off   []int64
	lines [][]string // per node, read since the last skip
}

func newLogReader(c *integration.Cluster) *logReader {
	return &logReader{nodes: c.Nodes, off: make([]int64, len(c.Nodes)), lines: make([][]string, len(c.Nodes))}
}

// read appends each node's new lines to r.lines.
func (r *logReader) read() error {
	for i, n := range r.nodes {
		f, err := os.Open(n.LogPath)
		if err != nil {
			return err
		}
		if _, err := f.Seek(r.off[i], io.SeekStart); err != nil {
			f.Close()
			return err
		}
		br := bufio.NewReader(f)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break // a partial last line is read next time
			}
			r.off[i] += int64(len(line))
			r.lines[i] = append(r.lines[i], line)
		}
		f.Close()
	}
	return nil
}

// skip forgets everything logged so far.
func (r *logReader) skip() {
	_ = r.read()
	for i := range r.lines {
		r.lines[i] = nil
	}
}

// logTime returns the time= of a server's log line.
func logTime(line string) (time.Time, bool) {
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	v, _, _ = strings.Cut(v, " ")
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// phases reads what the survivors of killed's death logged after at.
func (r *logReader) phases(killed *integration.Node, at time.Time) (phases, error) {
	var p phases
	if err := r.read(); err != nil {
		return p, err
	}
	// Log times have millisecond precision: a line of the kill's own
	// millisecond counts as after it.
	from := at.Truncate(time.Millisecond)
	var detects []time.Duration
	for i, n := range r.nodes {
		if n == killed {
			continue
		}
		var detect time.Duration
		for _, line := range r.lines[i] {
			t, ok := logTime(line)
			if !ok || t.Before(from) {
				continue
			}
			since := max(t.Sub(at), time.Millisecond)
			switch {
			case strings.Contains(line, msgDetect):
				if detect == 0 {
					detect = since
				}
			case strings.Contains(line, msgWon):
				if p.won == 0 || since < p.won {
					p.won = since
				}
			case strings.Contains(line, msgReady):
				if p.ready == 0 || since < p.ready {
					p.ready = since
				}
			case strings.Contains(line, msgPreVoteLost), strings.Contains(line, msgRetry):
				p.retries++
			}
		}
		if detect > 0 {
			detects = append(detects, detect)
		}
	}
	slices.Sort(detects)
	if len(detects) > 0 {
		p.detectFirst, p.detectBoth = detects[0], detects[len(detects)-1]
	}
	if len(detects) < 2 {
		p.detectBoth = 0
	}
	for i := range r.lines {
		r.lines[i] = nil
	}
	return p, nil
}

// count counts, over every node's lines since the last skip, the lines
// holding each of msgs.
func (r *logReader) count(msgs ...string) (map[string]int, error) {
	if err := r.read(); err != nil {
		return nil, err
	}
	n := map[string]int{}
	for _, lines := range r.lines {
		for _, line := range lines {
			for _, m := range msgs {
				if strings.Contains(line, m) {
					n[m]++
				}
			}
		}
	}
	return n, nil
}
