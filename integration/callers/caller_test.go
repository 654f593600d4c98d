package callers_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/callers"
)

// fakeDNS is an authoritative server for one name on loopback, answering
// the A records of the addresses it is given, with a TTL, and noting
// where queries came from.
type fakeDNS struct {
	addr string
	mu   sync.Mutex
	ips  []string
	ttl  uint32
	from map[string]int
	// silent drops every query unanswered (a partition), counting them.
	silent  bool
	dropped int
}

func startDNS(t *testing.T, name string, ttl uint32, ips ...string) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeDNS{addr: pc.LocalAddr().String(), ips: ips, ttl: ttl, from: map[string]int{}}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		host, _, _ := net.SplitHostPort(w.RemoteAddr().String())
		f.mu.Lock()
		if f.silent {
			f.dropped++
			f.mu.Unlock()
			return
		}
		f.from[host]++
		for _, ip := range f.ips {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: f.ttl}, A: net.ParseIP(ip)})
		}
		f.mu.Unlock()
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return f
}

func (f *fakeDNS) set(ips ...string) {
	f.mu.Lock()
	f.ips = ips
	f.mu.Unlock()
}

// run starts c until the test ends (or stop is called) and returns stop.
func run(t *testing.T, c interface{ Run(context.Context) error }) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func count(r callers.Record, pred func(callers.Request) bool) int {
	n := 0
	for _, q := range r.Requests {
		if pred(q) {
			n++
		}
	}
	return n
}

// TestDNSCaller: over each protocol, a DNS caller resolving from a given
// source address sends to every address of the answer, records a slow
// instance's answers past its deadline as timeouts, a refusing one's as
// failures at the address tried, and sees a withdrawal once the answer's
// TTL has passed.
func TestDNSCaller(t *testing.T) {
	const name = "web.shop.svc.cairn.internal."
	for _, proto := range []callers.Protocol{callers.HTTP, callers.GRPC, callers.TCP} {
		t.Run(string(proto), func(t *testing.T) {
			ss, port := startStandins(t, proto, "i", "127.11.0.1", "127.12.0.1")
			f := startDNS(t, name, 1, "127.11.0.1", "127.12.0.1")
			c, err := callers.NewDNS(callers.DNSDirect, callers.DNSConfig{
				Config: callers.Config{Name: "d", Rate: 100, Timeout: 150 * time.Millisecond},
				Server: f.addr, Query: name, Port: port, Protocol: proto, Source: net.ParseIP("127.11.0.200")})
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, c)
			poll := func(what string, f func(callers.Record) bool) {
				t.Helper()
				if err := integration.Poll(10*time.Second, 20*time.Millisecond, func() error {
					if !f(c.Snapshot()) {
						return fmt.Errorf("%s: not yet", what)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			poll("both instances answered", func(r callers.Record) bool {
				return count(r, func(q callers.Request) bool { return q.Instance == "i-0" && q.Result == callers.Success }) > 0 &&
					count(r, func(q callers.Request) bool { return q.Instance == "i-1" && q.Addr == ss[1].addr }) > 0
			})
			ss[1].Slow(time.Second)
			poll("i-1 timed out", func(r callers.Record) bool {
				return count(r, func(q callers.Request) bool { return q.Addr == ss[1].addr && q.Result == callers.Timeout }) > 0
			})
			ss[1].Refuse()
			poll("i-1 refused", func(r callers.Record) bool {
				return count(r, func(q callers.Request) bool { return q.Addr == ss[1].addr && q.Result == callers.Failure }) > 0
			})
			f.set("127.11.0.1")
			withdrawn := time.Now()
			poll("i-1 withdrawn from the view", func(r callers.Record) bool {
				v := r.Views[len(r.Views)-1]
				return len(v.Addrs) == 1 && v.Addrs[0] == ss[0].addr
			})
			stop()
			r := c.Snapshot()
			if got := r.Views[len(r.Views)-1].At.Sub(withdrawn); got > 1500*time.Millisecond {
				t.Errorf("the view changed %v after the answer did; the TTL is 1s", got)
			}
			if late := count(r, func(q callers.Request) bool { return q.Addr == ss[1].addr && q.At.After(r.Views[len(r.Views)-1].At) }); late > 0 {
				t.Errorf("%d requests to i-1 after it left the view", late)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.from["127.11.0.200"] == 0 || len(f.from) != 1 {
				t.Errorf("queries came from %v, want 127.11.0.200 only", f.from)
			}
		})
	}
}

// TestEnvoyCaller: the instance comes from the header; a 503 is a
// failure, a 504 a timeout.
func TestEnvoyCaller(t *testing.T) {
	var mu sync.Mutex
	code := http.StatusOK
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if code == http.StatusOK {
			w.Header().Set(callers.InstanceHeader, "i-7")
		}
		w.WriteHeader(code)
	}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	c, err := callers.NewEnvoy(callers.EnvoyConfig{Config: callers.Config{Name: "e", Rate: 200}, URL: "http://" + ln.Addr().String() + "/"})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	for _, step := range []struct {
		code int
		want callers.Result
	}{{200, callers.Success}, {503, callers.Failure}, {504, callers.Timeout}} {
		mu.Lock()
		code = step.code
		mu.Unlock()
		integration.Eventually(t, 5*time.Second, func() error {
			r := c.Snapshot()
			if n := count(r, func(q callers.Request) bool {
				return q.Result == step.want && (q.Instance == "i-7") == (step.want == callers.Success)
			}); n == 0 {
				return fmt.Errorf("no %s yet", step.want)
			}
			return nil
		})
	}
	stop()
	if _, err := callers.NewEnvoy(callers.EnvoyConfig{Config: callers.Config{Name: "e", Rate: 1}, URL: "127.0.0.1:80"}); err == nil {
		t.Error("a URL without a scheme was taken")
	}
	if _, err := callers.NewEnvoy(callers.EnvoyConfig{Config: callers.Config{Name: "e", Rate: 5000}, URL: "http://x/"}); err == nil {
		t.Error("a rate above MaxRate was taken")
	}
}

// TestDNSCallerServeStale: with ServeStale, a server that stops
// answering (a partition) costs no request: the stale answer serves at
// once while one query at a time tries again in the background.
func TestDNSCallerServeStale(t *testing.T) {
	const name = "web.shop.svc.cairn.internal."
	_, port := startStandins(t, callers.TCP, "i", "127.11.0.1", "127.12.0.1")
	f := startDNS(t, name, 1, "127.11.0.1", "127.12.0.1")
	c, err := callers.NewDNS(callers.DNSDirect, callers.DNSConfig{
		Config: callers.Config{Name: "d", Rate: 50, Timeout: 300 * time.Millisecond},
		Server: f.addr, Query: name, Port: port, Protocol: callers.TCP, ServeStale: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	integration.Eventually(t, 10*time.Second, func() error {
		if count(c.Snapshot(), func(q callers.Request) bool { return q.Result == callers.Success }) == 0 {
			return fmt.Errorf("no answer yet")
		}
		return nil
	})
	f.mu.Lock()
	f.silent = true
	f.mu.Unlock()
	silent := time.Now()
	// Past the TTL, two refreshes unanswered.
	integration.Eventually(t, 10*time.Second, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.dropped < 2 || time.Since(silent) < 2500*time.Millisecond {
			return fmt.Errorf("%d queries dropped", f.dropped)
		}
		return nil
	})
	stop()
	r := c.Snapshot()
	ok, bad := 0, 0
	for _, q := range r.Requests {
		if q.At.After(silent) {
			if q.Result == callers.Success {
				ok++
			} else {
				bad++
				t.Errorf("a request at %v failed: %s (%s)", q.At.Sub(silent), q.Result, q.Err)
			}
		}
	}
	if ok == 0 || bad > 0 {
		t.Errorf("while the server was silent: %d succeeded, %d did not", ok, bad)
	}
}
