package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// listen returns a loopback listener closed at the end of the test.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func addrOf(t *testing.T, a net.Addr) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// closedAddr returns a loopback address nothing listens on: a connection
// to it is refused.
func closedAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := addrOf(t, ln.Addr())
	_ = ln.Close()
	return ap
}

func serverAddr(t *testing.T, s *httptest.Server) netip.AddrPort {
	t.Helper()
	return addrOf(t, s.Listener.Addr())
}

func target(kind Kind, addr netip.AddrPort) Target {
	return Target{ID: "t", Kind: kind, Addr: addr, Interval: 2 * time.Second, Timeout: time.Second}
}

func TestCheckTCP(t *testing.T) {
	t.Run("accepted connection passes", func(t *testing.T) {
		ln := listen(t)
		o := CheckTCP(t.Context(), target(TCP, addrOf(t, ln.Addr())))
		if !o.OK || o.Hard || o.Err != "" {
			t.Fatalf("outcome %+v; want OK", o)
		}
		if o.Latency <= 0 {
			t.Errorf("latency %v; want > 0", o.Latency)
		}
	})
	t.Run("refused connection is hard", func(t *testing.T) {
		o := Check(t.Context(), target(TCP, closedAddr(t)))
		if o.OK || !o.Hard || o.Unreachable || o.Err != "connection refused" {
			t.Fatalf("outcome %+v; want a hard failure, connection refused", o)
		}
	})
	t.Run("cancelled context fails softly", func(t *testing.T) {
		ln := listen(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		o := CheckTCP(ctx, target(TCP, addrOf(t, ln.Addr())))
		if o.OK || o.Hard {
			t.Fatalf("outcome %+v; want a soft failure", o)
		}
	})
}

// requests records what an HTTP server was sent.
type requests struct {
	mu      sync.Mutex
	headers []http.Header
}

func (r *requests) add(h http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = append(r.headers, h.Clone())
}

func (r *requests) all() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

func TestCheckHTTP(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
	}))
	t.Cleanup(other.Close)

	seen := &requests{}
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		seen.add(r.Header)
		code, _ := strconv.Atoi(r.PathValue("code"))
		if code >= 300 && code < 400 {
			w.Header().Set("Location", other.URL+"/landing")
		}
		// A session cookie that a browser would send back.
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "s3cret"})
		w.WriteHeader(code)
		_, _ = w.Write([]byte(strings.Repeat("x", 64<<10))) // more than a check reads
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	addr := serverAddr(t, srv)

	for _, tc := range []struct {
		code int
		ok   bool
	}{
		{200, true}, {204, true}, {301, true}, {302, true}, {399, true},
		{400, false}, {404, false}, {500, false}, {503, false},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			tg := target(HTTP, addr)
			tg.Path = "/status/" + strconv.Itoa(tc.code)
			o := CheckHTTP(t.Context(), tg)
			if o.OK != tc.ok || o.Hard || o.Unreachable || o.Code != tc.code {
				t.Fatalf("outcome %+v; want OK=%v, Code=%d, not hard", o, tc.ok, tc.code)
			}
			if !tc.ok && o.Err != "HTTP "+strconv.Itoa(tc.code) {
				t.Errorf("Err %q; want %q", o.Err, "HTTP "+strconv.Itoa(tc.code))
			}
		})
	}

	t.Run("redirect is a pass and is not followed", func(t *testing.T) {
		before := elsewhere.Load()
		for _, code := range []string{"301", "302", "307", "308"} {
			tg := target(HTTP, addr)
			tg.Path = "/status/" + code
			if o := CheckHTTP(t.Context(), tg); !o.OK {
				t.Fatalf("%s: outcome %+v; want OK", code, o)
			}
		}
		if n := elsewhere.Load() - before; n != 0 {
			t.Fatalf("the redirect target was hit %d times; want 0", n)
		}
	})

	t.Run("no credentials, no cookies, our user agent", func(t *testing.T) {
		seen.mu.Lock()
		seen.headers = nil
		seen.mu.Unlock()
		tg := target(HTTP, addr)
		tg.Path = "/status/200?token=abc"
		// Twice over one reused connection, as the Prober does, so that
		// a cookie jar would have something to send back.
		c, err := newConn(tg, true)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		for range 2 {
			if o, _ := runCheck(t.Context(), tg, c); !o.OK {
				t.Fatalf("outcome %+v; want OK", o)
			}
		}
		_ = CheckHTTP(t.Context(), tg)
		hs := seen.all()
		if len(hs) != 3 {
			t.Fatalf("server saw %d requests; want 3", len(hs))
		}
		for i, h := range hs {
			for _, k := range []string{"Authorization", "Cookie", "Proxy-Authorization"} {
				if v := h.Get(k); v != "" {
					t.Errorf("request %d carried %s: %q", i, k, v)
				}
			}
			if ua := h.Get("User-Agent"); ua != "cairn-probe/1" {
				t.Errorf("request %d User-Agent %q; want cairn-probe/1", i, ua)
			}
		}
	})

	t.Run("credentials in the path are refused", func(t *testing.T) {
		for _, p := range []string{"//user:pw@127.0.0.1/", "http://user:pw@127.0.0.1/", "user:pw@x/"} {
			tg := target(HTTP, addr)
			tg.Path = p
			if err := tg.Validate(); err == nil {
				t.Errorf("Path %q validated", p)
			}
			if o := CheckHTTP(t.Context(), tg); o.OK {
				t.Errorf("Path %q: outcome %+v; want a failure without a request", p, o)
			}
		}
	})

	t.Run("slow answer is a soft failure", func(t *testing.T) {
		tg := target(HTTP, addr)
		tg.Path = "/slow"
		tg.Timeout = 200 * time.Millisecond
		o := CheckHTTP(t.Context(), tg)
		// It connected: the target was reached and did not answer in
		// time, which is evidence, not an unreachable path.
		if o.OK || o.Hard || o.Unreachable || o.Err != "timeout" {
			t.Fatalf("outcome %+v; want a soft timeout, not unreachable", o)
		}
		if o.Latency < tg.Timeout {
			t.Errorf("latency %v shorter than the timeout %v", o.Latency, tg.Timeout)
		}
	})

	t.Run("refused connection is hard and says nothing of the URL", func(t *testing.T) {
		tg := target(HTTP, closedAddr(t))
		tg.Path = "/health?token=s3cret"
		o := CheckHTTP(t.Context(), tg)
		if o.OK || !o.Hard || o.Unreachable {
			t.Fatalf("outcome %+v; want hard", o)
		}
		if strings.Contains(o.Err, "s3cret") || strings.Contains(o.Err, "/health") {
			t.Errorf("Err %q leaks the URL", o.Err)
		}
	})
}

// grpcServer serves s on a loopback listener until the test ends.
func grpcServer(t *testing.T, s *grpc.Server) netip.AddrPort {
	t.Helper()
	ln := listen(t)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.Serve(ln)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-served
	})
	return addrOf(t, ln.Addr())
}

func TestCheckGRPC(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	withHealth := grpc.NewServer()
	healthpb.RegisterHealthServer(withHealth, hs)
	addr := grpcServer(t, withHealth)
	bare := grpcServer(t, grpc.NewServer())

	for _, tc := range []struct {
		name    string
		addr    netip.AddrPort
		service string
		want    Outcome // Latency ignored
	}{
		{"server serving", addr, "", Outcome{OK: true, Code: 1}},
		{"service serving", addr, "up", Outcome{OK: true, Code: 1}},
		{"service not serving", addr, "down", Outcome{Code: 2, Err: "grpc health NOT_SERVING"}},
		{"unknown service", addr, "nope", Outcome{Err: "grpc health service unknown"}},
		{"no health service", bare, "", Outcome{Err: "grpc health service unimplemented"}},
		{"nothing listening", closedAddr(t), "", Outcome{Hard: true, Err: "connection refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := target(GRPC, tc.addr)
			tg.Service = tc.service
			o := CheckGRPC(t.Context(), tg)
			o.Latency = 0
			if o != tc.want {
				t.Fatalf("outcome %+v; want %+v", o, tc.want)
			}
		})
	}

	t.Run("a reused channel sees the server go away", func(t *testing.T) {
		s := grpc.NewServer()
		healthpb.RegisterHealthServer(s, health.NewServer())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = s.Serve(ln)
		}()
		tg := target(GRPC, addrOf(t, ln.Addr()))
		c, err := newConn(tg, true)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		if o, broken := runCheck(t.Context(), tg, c); !o.OK || broken {
			t.Fatalf("outcome %+v (broken %v); want OK", o, broken)
		}
		s.Stop() // closes the listener and the channel's connection
		<-served
		o, broken := runCheck(t.Context(), tg, c)
		if o.OK || !o.Hard || !broken {
			t.Fatalf("outcome %+v (broken %v); want hard and broken", o, broken)
		}
	})

	t.Run("slow server is a soft timeout", func(t *testing.T) {
		// Accepts TCP and never speaks HTTP/2.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var (
			wg    sync.WaitGroup
			conns []net.Conn // owned by the accept loop until wg.Wait
		)
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				conns = append(conns, c)
			}
		})
		defer func() {
			_ = ln.Close()
			wg.Wait()
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		tg := target(GRPC, addrOf(t, ln.Addr()))
		tg.Timeout = 300 * time.Millisecond
		o := CheckGRPC(t.Context(), tg)
		if o.OK || o.Hard || !o.Unreachable {
			t.Fatalf("outcome %+v; want a soft failure, unreachable", o)
		}
	})
}

// TestCheckResetIsEvidence: a connection reset by the target is an
// answer, not silence: never Unreachable (SPEC §2).
func TestCheckResetIsEvidence(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Linger 0: close sends RST.
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
	})
	defer func() {
		_ = ln.Close()
		wg.Wait()
	}()
	tg := target(HTTP, addrOf(t, ln.Addr()))
	tg.Path = "/"
	o := CheckHTTP(t.Context(), tg)
	if o.OK || o.Hard || o.Unreachable {
		t.Fatalf("outcome %+v; want a failure that is neither hard nor unreachable", o)
	}
}
