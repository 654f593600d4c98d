package health

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// listen returns a loopback listener that accepts and closes every
// connection until the test ends.
func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l
}

// refusedPort returns a loopback port nothing listens on: connecting to
// it is refused.
func refusedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return int(ap.Port())
}

// TestRunWithProber runs a Node with a real prober against loopback
// listeners, on the real clock: a refused connection withdraws at once
// (hard), an HTTP 503 after three probes, and the 503 instance comes
// back once it answers 200 again. A check the prober refuses (a path the
// store lets through) leaves its instance unprobed without stopping the
// others' probes.
func TestRunWithProber(t *testing.T) {
	st := storetest.Single(t, store.Config{})
	fast := func(kind, path string) *wire.Check {
		return &wire.Check{Type: kind, Path: path,
			Interval: wire.Duration(150 * time.Millisecond), Timeout: wire.Duration(120 * time.Millisecond)}
	}
	tcpSvc := tcpService("shop", "cart")
	tcpSvc.Check = fast("tcp", "")
	webSvc := tcpService("shop", "web")
	webSvc.Check = fast("http", "/healthz")
	admitMin := wire.Duration(100 * time.Millisecond)
	webSvc.Policy.AdmitMin = &admitMin
	badSvc := tcpService("shop", "bad")
	badSvc.Check = fast("http", "//not-a-path")
	if _, err := st.ApplyServices(t.Context(), "admin", []wire.Service{tcpSvc, webSvc, badSvc}); err != nil {
		t.Fatal(err)
	}

	var code atomic.Int32
	code.Store(http.StatusServiceUnavailable)
	flakySrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(code.Load()))
	}))
	t.Cleanup(flakySrv.Close)
	okSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(okSrv.Close)

	at := func(svc wire.Service, id string, port int) wire.Instance {
		r := reg(svc, id, "127.0.0.1")
		r.Ports = map[string]int{"main": port}
		return register(t, st.Store, r)
	}
	up := at(tcpSvc, "up", portOf(t, listen(t).Addr().String()))
	down := at(tcpSvc, "down", refusedPort(t))
	ok := at(webSvc, "ok", portOf(t, okSrv.Listener.Addr().String()))
	flaky := at(webSvc, "flaky", portOf(t, flakySrv.Listener.Addr().String()))
	unprobed := at(badSvc, "x", portOf(t, okSrv.Listener.Addr().String()))

	p, err := probe.New(probe.Config{Observer: st.NodeID(), BatchInterval: 20 * time.Millisecond,
		Registerer: prometheus.NewRegistry(), Logger: storetest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	n := newNodeWith(t, st.Store, nil, 0, func(c *Config) { c.Prober = p }, func(c *publish.Config) { c.Interval = 20 * time.Millisecond })
	stop := run(t, n)

	entryOf := func(in wire.Instance) status.Entry {
		e, _ := n.pub.Status(in.Key().String(), in.Incarnation)
		return e
	}
	health := func(in wire.Instance) *wire.Health {
		got, _ := st.Instance(in.Key())
		return got.Health
	}
	until := func(in wire.Instance, verdict status.Verdict, eligible bool) {
		t.Helper()
		waitFor(t, func() error {
			e, found := n.pub.Status(in.Key().String(), in.Incarnation)
			if !found || e.Verdict != verdict || e.Flags.Has(status.Eligible) != eligible {
				return fmt.Errorf("%s: entry %+v (found %t), want %v eligible=%t", in.ID, e, found, verdict, eligible)
			}
			return nil
		})
	}
	until(down, status.Unhealthy, false)
	if h := health(down); h == nil || len(h.Failing) != 1 || !h.Failing[0].Hard || h.Evidence == nil || h.Evidence.Observer != st.NodeID() {
		t.Errorf("refused instance's health %+v, want a hard probe failure observed by %s", h, st.NodeID())
	}
	until(flaky, status.Unhealthy, false)
	if h := health(flaky); h == nil || len(h.Failing) != 1 || h.Failing[0].Hard || h.Failing[0].Why != "3 consecutive failures" {
		t.Errorf("503 instance's health %+v, want the probe class failing on 3 consecutive failures", h)
	}
	until(up, status.Healthy, true)
	until(ok, status.Healthy, true)

	code.Store(http.StatusOK)
	until(flaky, status.Healthy, true)
	if e := entryOf(flaky); !e.Flags.Has(status.SlowStart) || e.Weight >= e.BaseWeight {
		t.Errorf("re-admitted entry %+v (flags %v), want slow start", e, e.Flags)
	}

	// The service whose check the prober refuses is not probed, and its
	// instance stays unknown and eligible; the four others are probed.
	if e := entryOf(unprobed); e.Verdict != status.Unknown || !e.Flags.Has(status.Eligible) {
		t.Errorf("unprobed instance: %+v, want unknown and eligible", e)
	}
	if got := nodeMetric(t, n, "cairn_health_probe_targets"); got != 4 {
		t.Errorf("cairn_health_probe_targets = %v, want 4", got)
	}
	stop()
}
