package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/integration"
)

// dnsProber sends A queries for one name to the live nodes in turn and
// counts every one not answered with at least one record. A node is taken
// out (setDown) before it is killed and put back once it is ready again;
// a query in flight when its node was taken out is not counted.
type dnsProber struct {
	nodes []*integration.Node
	name  string

	mu    sync.Mutex
	down  []bool
	gen   []uint64 // bumped by every setDown
	res   dnsResult
	next  int
	inUse int
}

type dnsResult struct {
	sent, ok, skipped int
	fails             map[string]int // by kind and node
	firstFail         string
	lastFail          string
	lat               []time.Duration // of the answered queries
}

func (r dnsResult) details() string {
	s := fmt.Sprintf("latency p50 %s, p99 %s, max %s", ms(pct(r.lat, 50)), ms(pct(r.lat, 99)), ms(pct(r.lat, 100)))
	if r.skipped > 0 {
		s += fmt.Sprintf("; %d not sent (%d already in flight)", r.skipped, maxDNSInFlight)
	}
	if len(r.fails) > 0 {
		s += fmt.Sprintf("; failures %v, first: %s; last: %s", r.fails, r.firstFail, r.lastFail)
	}
	return s
}

// maxDNSInFlight bounds the prober's queries in flight.
const maxDNSInFlight = 64

func newDNSProber(nodes []*integration.Node, name string) *dnsProber {
	return &dnsProber{nodes: nodes, name: name, down: make([]bool, len(nodes)), gen: make([]uint64, len(nodes)),
		res: dnsResult{fails: map[string]int{}}}
}

func (p *dnsProber) setDown(i int, down bool) {
	p.mu.Lock()
	p.down[i] = down
	p.gen[i]++
	p.mu.Unlock()
}

// run sends rate queries a second until the returned stop is called or
// ctx is done; stop waits for the queries in flight and returns the
// counts. It may be called more than once.
func (p *dnsProber) run(ctx context.Context, rate int) func() dnsResult {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		start, sent := time.Now(), 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			due := int(time.Since(start).Seconds()*float64(rate)) - sent
			for ; due > 0; due-- {
				sent++
				i, gen, ok := p.pick()
				if !ok {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.query(i, gen)
				}()
			}
		}
	}()
	var once sync.Once
	return func() dnsResult {
		once.Do(func() {
			cancel()
			<-done
			wg.Wait()
		})
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.res
	}
}

// pick chooses the next live node, unless maxDNSInFlight queries are out.
func (p *dnsProber) pick() (int, uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inUse >= maxDNSInFlight {
		p.res.skipped++
		return 0, 0, false
	}
	for range p.nodes {
		i := p.next % len(p.nodes)
		p.next++
		if !p.down[i] {
			p.inUse++
			return i, p.gen[i], true
		}
	}
	return 0, 0, false
}

func (p *dnsProber) query(i int, gen uint64) {
	q := new(dns.Msg)
	q.SetQuestion(p.name, dns.TypeA)
	cl := &dns.Client{Net: "udp", Timeout: time.Second}
	start := time.Now()
	r, _, err := cl.Exchange(q, p.nodes[i].DNSAddr)
	lat := time.Since(start)
	var fail string
	switch {
	case err != nil:
		fail = "error"
		if strings.Contains(err.Error(), "timeout") {
			fail = "timeout"
		}
	case r.Rcode != dns.RcodeSuccess:
		fail = dns.RcodeToString[r.Rcode]
	case len(r.Answer) == 0:
		fail = "no records"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse--
	if p.gen[i] != gen {
		return // its node was taken out meanwhile
	}
	p.res.sent++
	if fail == "" {
		p.res.ok++
		p.res.lat = append(p.res.lat, lat)
		return
	}
	p.res.fails[fail+" from "+p.nodes[i].ID]++
	p.res.lastFail = fmt.Sprintf("%s from %s at %s: %v", fail, p.nodes[i].ID, start.UTC().Format("15:04:05.000"), err)
	if p.res.firstFail == "" {
		p.res.firstFail = p.res.lastFail
	}
}

// hogEnv makes storebench a busy loop for the duration it holds: the
// children -calm-hogs starts.
const hogEnv = "STOREBENCH_HOG"

// hog spins for the duration d says, at most 10 minutes.
func hog(d string) {
	dur, err := time.ParseDuration(d)
	if err != nil || dur <= 0 || dur > 10*time.Minute {
		fmt.Fprintf(os.Stderr, "storebench: %s=%q is not a duration up to 10m\n", hogEnv, d)
		os.Exit(2)
	}
	end := time.Now().Add(dur)
	x := 0
	for time.Now().Before(end) {
		for i := range 1_000_000 {
			x += i
		}
	}
	if x == 42 {
		fmt.Println(x) // keeps the loop from being optimised away
	}
}

// startHogs starts n busy-looping copies of this program, each stopping
// by itself after d.
func startHogs(n int, d time.Duration) ([]*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var hogs []*exec.Cmd
	for range n {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), hogEnv+"="+d.String())
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			stopHogs(hogs)
			return nil, err
		}
		hogs = append(hogs, cmd)
	}
	return hogs, nil
}

func stopHogs(hogs []*exec.Cmd) {
	for _, h := range hogs {
		_ = h.Process.Kill()
		_ = h.Wait()
	}
}
