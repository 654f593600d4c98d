package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/cairn-sd/cairn/bench/benchproc"
	"github.com/cairn-sd/cairn/bench/pace"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// run makes one run and returns its report; with an error, the report
// when the run got as far as one (streams that failed, an evacuation
// refused).
func run(ctx context.Context, o options) (*report, error) {
	dir, remove, err := benchproc.TempDir("xdsload", o.keep)
	if err != nil {
		return nil, err
	}
	defer remove()
	var tgt *target
	if o.target == "cairn" {
		tgt, err = startCairn(ctx, o, dir)
	} else {
		tgt, err = startPeer(ctx, o, dir)
	}
	if err != nil {
		return nil, err
	}
	defer tgt.close()
	pid := tgt.proc.Pid()

	rng := rand.New(rand.NewPCG(o.seed, 1))
	subs, watchers := newSubscribers(o, rng)
	capacity := int(o.rate/60*o.duration.Seconds()*1.05) + 100
	w := &world{o: o, log: newChangeLog(o, capacity), dec: newDecoder(o), svcOf: map[string]int{},
		epoch: time.Now(), streams: int64(o.streams), allIn: make(chan struct{})}
	for s := range o.services {
		w.svcOf[resourceName(s)] = s
	}
	for _, s := range subs {
		s.tally = &w.seen
	}
	var fl *fleet
	if o.envoys > 0 {
		t0 := time.Now()
		if fl, err = startFleet(ctx, o, w, dir, tgt.grpcAddr); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, tgt.proc.Tail())
		}
		defer fl.close()
		fl.layout = time.Since(t0)
	}
	if err := waitLayout(ctx, tgt, o, w); err != nil {
		return nil, fmt.Errorf("waiting for the layout over xDS: %w\n%s", err, tgt.proc.Tail())
	}
	rssIdle, err := rss(pid)
	if err != nil {
		return nil, err
	}

	// The streams' context ends with the run's but carries no deadline:
	// a stream opened under a deadline sends it as grpc-timeout, and the
	// server then keeps a timer and a deadline context per stream (some
	// 0.55 KiB of its memory a subscription) that no Envoy or gRPC client
	// asks of it, their ADS streams having none.
	sctx, stopStreams := context.WithCancel(context.WithoutCancel(ctx))
	defer context.AfterFunc(ctx, stopStreams)()
	var wg sync.WaitGroup
	defer func() { stopStreams(); wg.Wait() }()
	var hr *hostileReport
	var hs *hostile
	rssBase := rssIdle // what the honest streams' memory is counted from
	if o.hostile > 0 {
		if hs, hr, err = startHostile(ctx, o, tgt.grpcAddr, func() (uint64, error) { return rss(pid) }); err != nil {
			return nil, err
		}
		defer hs.close()
		rssBase = uint64(hr.RSSMiB * (1 << 20))
	}
	conns := make([]*grpc.ClientConn, o.conns)
	for i := range conns {
		if conns[i], err = dialFrom(tgt.grpcAddr, honestSrc(o, i)); err != nil {
			return nil, err
		}
		defer conns[i].Close()
	}
	admitStart := w.now()
	deadline := time.Now().Add(o.admitTimeout)
	for i, s := range subs {
		wg.Go(func() { w.run(sctx, conns[i%len(conns)], s, deadline) })
	}
	select {
	case <-w.allIn:
	case <-time.After(o.admitTimeout):
		return nil, fmt.Errorf("only %d of %d streams answered within -admit-timeout %s", w.admitted.Load(), o.streams, o.admitTimeout)
	case <-ctx.Done():
		return nil, fmt.Errorf("only %d of %d streams answered: %w", w.admitted.Load(), o.streams, ctx.Err())
	}
	admitAll := w.now() - admitStart
	rssStreams, err := rss(pid)
	if err != nil {
		return nil, err
	}

	// The changes.
	cpuS0, err := benchproc.CPU(pid)
	if err != nil {
		return nil, err
	}
	cpuG0 := selfCPU()
	lag := startSchedLag()
	var prof *profiler
	if o.perf != "" {
		if prof, err = startPerf(pid, o.perf); err != nil {
			return nil, err
		}
		defer prof.stop()
	}
	d := newDriver(o, rng, w.log, tgt)
	var envoyRSS []float64
	if fl != nil {
		if envoyRSS, err = fl.rss(); err != nil {
			return nil, err
		}
		if err := fl.startPolls(ctx); err != nil {
			return nil, err
		}
		d.after = fl.mark
	}
	if hs != nil {
		hr.HeldAtChanges, hr.OpenAtChanges = hs.held()
	}
	changesStart := w.now()
	dctx, stopDrive := context.WithCancel(ctx)
	defer stopDrive()
	var evacs sync.WaitGroup
	if o.evacuateAt > 0 {
		// Its calls fall within the changes: it ends with them, or
		// stops them when a call fails.
		evacs.Go(func() { w.evacuations(dctx, tgt, changesStart, stopDrive) })
	}
	issued, skipped := d.drive(dctx, w)
	evacs.Wait()
	changesEnd := w.now()
	// The last deliveries: until every expected delivery is seen or
	// shed, or -linger has passed.
	expected := func() int64 {
		var n int64
		for id := range w.log.n.Load() {
			if c := w.log.changes[id]; !c.failed {
				n += int64(len(watchers[c.svc]))
			}
		}
		return n
	}
	// A subscriber whose view of an endpoint is out of rotation, where
	// the endpoint's shed admission was followed by a withdrawal, never
	// sees anything more of it: the wait also ends once nothing has
	// arrived for 5 s (settle then closes those accounts).
	want := expected()
	last, lastAt := w.seen.Load(), time.Now()
	lingerErr := benchproc.Poll(ctx, o.linger, 100*time.Millisecond, func() error {
		got := w.seen.Load()
		if got >= want {
			return nil
		}
		if got != last {
			last, lastAt = got, time.Now()
		} else if time.Since(lastAt) > 5*time.Second {
			return nil
		}
		return fmt.Errorf("%d of %d deliveries seen", got, want)
	})
	// And until every Envoy shows every change, on the same terms.
	var envoysErr error
	if fl != nil {
		last, lastAt := fl.seen.Load(), time.Now()
		envoysErr = benchproc.Poll(ctx, o.linger, 100*time.Millisecond, func() error {
			n := fl.pending()
			if n == 0 {
				return nil
			}
			if got := fl.seen.Load(); got != last {
				last, lastAt = got, time.Now()
			} else if time.Since(lastAt) > 5*time.Second {
				return fmt.Errorf("%d services an Envoy does not show the last change of, for 5 s", n)
			}
			return fmt.Errorf("%d services an Envoy has yet to show", n)
		})
	}
	lingered := w.now() - changesEnd
	cpuS1, err := benchproc.CPU(pid)
	if err != nil {
		return nil, err
	}
	cpuG1 := selfCPU()
	genLag := lag.stop()
	var envoyCPU, envoyCPUOthers time.Duration
	var endChecked, endAsWant int
	var endFirst string
	var envoyRSSAfter []float64
	if fl != nil {
		if envoyCPU, envoyCPUOthers, err = fl.cpu(); err != nil {
			return nil, err
		}
		if envoyRSSAfter, err = fl.rss(); err != nil {
			return nil, err
		}
		fl.stopPolls()
		fl.wg.Wait()
		endChecked, endAsWant, endFirst = fl.endCheck(ctx, d.out())
	}
	if prof != nil {
		if err := prof.stop(); err != nil {
			return nil, err
		}
	}
	rssAfter, err := rss(pid)
	if err != nil {
		return nil, err
	}
	if hs != nil {
		hr.HeldAfter, _ = hs.held()
	}
	stopStreams()
	wg.Wait()
	if hs != nil {
		hs.close()
		hs.report(hr)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for _, s := range subs {
		s.settle(w)
	}
	if fl != nil {
		for _, s := range fl.subs {
			s.settle(w)
		}
	}

	r := summarize(o, w, subs, watchers, nil)
	r.Evacuation = evacSummary(o, w, subs, watchers, changesStart, changesEnd)
	r.Target, r.Mode = tgt.name, o.mode
	r.Rev = revision(ctx, o)
	r.Skipped = skipped
	r.Issued, r.APIErrors, r.FirstAPIError = issued, int(d.errors.Load()), d.firstError()
	r.ChangeSeconds = (changesEnd - changesStart).Seconds()
	r.AchievedPerMinute = float64(issued) / r.ChangeSeconds * 60
	r.LingerSeconds = lingered.Seconds()
	r.LingerComplete = lingerErr == nil && w.seen.Load() >= want
	r.AdmitAllSeconds = admitAll.Seconds()
	r.ServerCPUSeconds = (cpuS1 - cpuS0).Seconds()
	r.ServerCPUPercent = 100 * r.ServerCPUSeconds / (changesEnd - changesStart + lingered).Seconds()
	r.GeneratorCPUSeconds = (cpuG1 - cpuG0).Seconds()
	r.GeneratorLag = genLag
	r.RSSIdleMiB, r.RSSStreamsMiB, r.RSSAfterMiB = mibOf(rssIdle), mibOf(rssStreams), mibOf(rssAfter)
	r.KiBPerSubAdmitted = (float64(rssStreams) - float64(rssBase)) / 1024 / float64(o.streams)
	r.KiBPerSubAfter = (float64(rssAfter) - float64(rssBase)) / 1024 / float64(o.streams)
	r.GeneratorPeakRSSMiB = selfPeakRSSMiB()
	r.Hostile = hr
	r.Decodes, r.DecodeHits = w.dec.Decodes()
	for _, s := range subs {
		if s.failedAfterAdmit {
			r.StreamsFailed++
		}
	}
	if fl != nil {
		er := summarize(o, w, fl.subs, fl.watchers, nil)
		e := &envoyReport{Envoys: o.envoys, Watched: o.envoyWatch, Bin: fl.bin, PollMs: ms(o.envoyPoll), LayoutSeconds: fl.layout.Seconds(),
			Polls: fl.polls.Load(), PollErrors: fl.pollErrs.Load(),
			AllShown: envoysErr == nil, Withdrawals: er.Withdrawals,
			RSSLayoutMiB: envoyRSS, RSSAfterMiB: envoyRSSAfter, CPUSeconds: (envoyCPU + envoyCPUOthers).Seconds()}
		span := (changesEnd - changesStart + lingered).Seconds()
		e.CPUPercent = 100 * envoyCPU.Seconds() / float64(o.envoyWatch) / span
		if o.envoys > o.envoyWatch {
			e.CPUPercentOthers = 100 * envoyCPUOthers.Seconds() / float64(o.envoys-o.envoyWatch) / span
		}
		e.PollsPerSecond = float64(e.Polls) / float64(o.envoyWatch) / span
		e.EndChecked, e.EndAsWant, e.EndFirst = endChecked, endAsWant, endFirst
		if p := fl.firstErr.Load(); p != nil {
			e.FirstPollErr = *p
		}
		var rtt []time.Duration
		for _, r := range fl.rtt {
			rtt = append(rtt, r...)
		}
		slices.Sort(rtt)
		e.PollRTTP50ms, e.PollRTTP99ms = ms(pct(rtt, 50)), ms(pct(rtt, 99))
		r.Envoys = e
	}
	switch {
	case r.StreamsFailed > 0:
		return &r, fmt.Errorf("%d streams failed after their first answer", r.StreamsFailed)
	case w.evac.err != nil:
		return &r, fmt.Errorf("evacuating %s: %w", o.evacZone, w.evac.err)
	case w.undo.err != nil:
		return &r, fmt.Errorf("undoing the evacuation of %s: %w", o.evacZone, w.undo.err)
	}
	return &r, nil
}

// waitLayout opens one stream watching every service and waits until
// each assignment has every endpoint in rotation on the base port: the
// target serves the whole layout.
func waitLayout(ctx context.Context, tgt *target, o options, w *world) error {
	cc, err := xdstest.Dial(tgt.grpcAddr)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var names []string
	for s := range o.services {
		names = append(names, resourceName(s))
	}
	full := map[string]bool{}
	return benchproc.Poll(ctx, 2*time.Minute, 200*time.Millisecond, func() error {
		st, err := xdstest.Open(ctx, cc, xdstest.Options{})
		if err == nil {
			err = st.Subscribe(resourcev3.EndpointType, names, nil)
		}
		if err != nil {
			return err
		}
		for len(full) < o.services {
			resp, err := st.Recv()
			if err != nil {
				return fmt.Errorf("%d of %d assignments complete: %w", len(full), o.services, err)
			}
			for _, r := range resp.Resources {
				got, err := w.dec.Decode(r)
				if err != nil {
					return err
				}
				ok := true
				for _, p := range got.ports {
					ok = ok && p == basePort
				}
				full[r.Name] = ok
			}
			n := 0
			for _, ok := range full {
				if ok {
					n++
				}
			}
			if n == o.services {
				return nil
			}
			if err := st.Ack(resp); err != nil {
				return err
			}
		}
		return nil
	})
}

// endpoint states in the driver.
const (
	stIn = iota
	stBusy
	stOut
	stDead // its change failed: left alone
)

// driver makes the changes.
type driver struct {
	o   options
	rng *rand.Rand
	log *changeLog
	tgt *target

	mu          sync.Mutex
	state       [][]uint8
	gen         [][]uint16
	outQ        [][2]int // committed out, oldest first
	withdrawing int      // withdrawals in flight
	// after, if set, is told the service of each withdrawal that
	// committed.
	after    func(svc int)
	errors   atomic.Int64
	firstErr error
}

func newDriver(o options, rng *rand.Rand, log *changeLog, tgt *target) *driver {
	d := &driver{o: o, rng: rng, log: log, tgt: tgt, state: make([][]uint8, o.services), gen: make([][]uint16, o.services)}
	for s := range d.state {
		d.state[s], d.gen[s] = make([]uint8, o.endpoints), make([]uint16, o.endpoints)
	}
	return d
}

func (d *driver) firstError() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.firstErr == nil {
		return ""
	}
	return d.firstErr.Error()
}

// out returns the endpoints out of rotation, oldest first, each as
// service, endpoint and the port it was withdrawn on.
func (d *driver) out() [][3]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out [][3]int
	for _, se := range d.outQ {
		out = append(out, [3]int{se[0], se[1], basePort + int(d.gen[se[0]][se[1]])})
	}
	return out
}

// next picks the next change: an admission of the endpoint out the
// longest once -out are out (or withdrawing), else a withdrawal of a
// random endpoint in rotation.
func (d *driver) next() (svc, ep int, port uint16, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.outQ)+d.withdrawing < d.o.out {
		for range 64 {
			s, e := d.rng.IntN(d.o.services), d.rng.IntN(d.o.endpoints)
			if d.state[s][e] == stIn {
				d.state[s][e] = stBusy
				d.withdrawing++
				return s, e, 0, true
			}
		}
	}
	if len(d.outQ) == 0 {
		return 0, 0, 0, false
	}
	se := d.outQ[0]
	d.outQ = d.outQ[1:]
	s, e := se[0], se[1]
	if d.gen[s][e] == 65535-basePort {
		d.state[s][e] = stDead
		return 0, 0, 0, false
	}
	d.gen[s][e]++
	d.state[s][e] = stBusy
	return s, e, uint16(basePort + int(d.gen[s][e])), true
}

func (d *driver) done(svc, ep int, port uint16, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if port == 0 {
		d.withdrawing--
	}
	switch {
	case err != nil:
		d.state[svc][ep] = stDead
		if d.firstErr == nil {
			d.firstErr = err
		}
		d.errors.Add(1)
	case port == 0:
		d.state[svc][ep] = stOut
		d.outQ = append(d.outQ, [2]int{svc, ep})
	default:
		d.state[svc][ep] = stIn
	}
}

// drive makes changes at the rate for the duration, and returns how
// many it made, and how many times it found no endpoint to change. Changes
// wait for a free worker: when the target's API cannot keep up, fewer
// are made (the report gives the achieved rate).
func (d *driver) drive(ctx context.Context, w *world) (issued, skipped int) {
	type job struct {
		id   int32
		svc  int
		ep   int
		port uint16
	}
	jobs := make(chan job, d.o.workers)
	var wg sync.WaitGroup
	for range d.o.workers {
		wg.Go(func() {
			for j := range jobs {
				c := &w.log.changes[j.id]
				c.start = w.now()
				err := d.tgt.change(ctx, j.svc, j.ep, j.port)
				c.commit = w.now()
				c.failed = err != nil
				d.done(j.svc, j.ep, j.port, err)
				if err == nil && j.port == 0 && d.after != nil {
					d.after(j.svc)
				}
			}
		})
	}
	// Each change is due at its place in the schedule: one the generator
	// is late for goes at once, rather than being dropped as a ticker's
	// missed tick would be. The run ends at its time all the same: what
	// the target could not take in it is not made.
	sched := pace.New(time.Now(), d.o.rate, d.o.duration, nil)
loop:
	for !sched.Over() {
		if _, err := sched.Next(ctx); err != nil {
			break loop
		}
		svc, ep, port, ok := d.next()
		if !ok {
			skipped++
			continue
		}
		id, ok := d.log.add(svc, ep, port)
		if !ok {
			d.done(svc, ep, port, errors.New("change log full"))
			break
		}
		select {
		case jobs <- job{id: id, svc: svc, ep: ep, port: port}:
			issued++
		case <-ctx.Done():
			w.log.changes[id].failed = true // never made
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	return issued, skipped
}

// profiler is a `perf record` of the server.
type profiler struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	once   sync.Once
}

// startPerf records pid's on-CPU stacks into path until stop.
func startPerf(pid int, path string) (*profiler, error) {
	p := &profiler{cmd: exec.Command("perf", "record", "-F", "199", "-g", "-p", strconv.Itoa(pid), "-o", path),
		exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = io.Discard, os.Stderr
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting perf record: %w", err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	return p, nil
}

// stop ends the recording (SIGINT, as perf expects), killing perf if it
// has not written its file within 30 s.
func (p *profiler) stop() error {
	var err error
	p.once.Do(func() {
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
			// perf exits with a status of its own when interrupted;
			// it has written its file if it says so on stderr.
			if ee := (*exec.ExitError)(nil); !errors.As(p.err, &ee) {
				err = p.err
			}
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
			err = errors.New("perf record did not stop within 30 s")
		}
	})
	return err
}
