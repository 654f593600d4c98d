package fleet

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// freePort returns a port free on 127.11.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.11.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestFleetModes: one instance of each kind answers as the package doc
// says in every mode, and the control API changes the modes.
func TestFleetModes(t *testing.T) {
	port := freePort(t)
	spec := Spec{Instances: []Instance{
		{ID: "h-1", Service: "shop/web", Zone: "a", Kind: KindHTTP, Addr: "127.11.0.1", Port: port},
		{ID: "h-2", Service: "shop/web", Zone: "b", Kind: KindHTTP, Addr: "127.12.0.1", Port: port},
		{ID: "g-1", Service: "shop/rpc", Zone: "a", Kind: KindGRPC, Addr: "127.11.0.2", Port: port},
		{ID: "t-1", Service: "shop/raw", Zone: "c", Kind: KindTCP, Addr: "127.13.0.1", Port: port},
	}}
	s, err := NewServer(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api := httptest.NewServer(Handler(s))
	defer api.Close()
	ctl := NewControl(api.URL)
	ctx := t.Context()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(addr, path string) (int, string, string, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s%s: %v", addr, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get(InstanceHeader), time.Since(start)
	}
	h1 := spec.Instances[0].HostPort()
	if code, body, hdr, _ := get(h1, "/"); code != 200 || body != "h-1" || hdr != "h-1" {
		t.Errorf("GET /: %d %q %s=%q; want 200, h-1, h-1", code, body, InstanceHeader, hdr)
	}
	if code, _, _, _ := get(h1, "/ready"); code != 200 {
		t.Errorf("GET /ready: %d; want 200", code)
	}
	if code, _, hdr, _ := get(h1, "/readyz"); code != 404 || hdr != "h-1" {
		t.Errorf("GET /readyz: %d %s=%q; want 404 from h-1", code, InstanceHeader, hdr)
	}

	// slow: callers wait, the readiness path does not.
	if err := ctl.SetIDs(ctx, ModeSlow, 300*time.Millisecond, "h-1", "g-1", "t-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, d := get(h1, "/"); d < 300*time.Millisecond {
		t.Errorf("slow GET / took %s; want at least 300ms", d)
	}
	if code, _, _, d := get(h1, "/ready"); code != 200 || d > 200*time.Millisecond {
		t.Errorf("slow GET /ready: %d in %s; want 200 at once", code, d)
	}
	start := time.Now()
	if line := readTCP(t, spec.Instances[3].HostPort()); line != "t-1" || time.Since(start) < 300*time.Millisecond {
		t.Errorf("slow tcp: %q after %s; want t-1 after 300ms", line, time.Since(start))
	}
	cc, err := grpc.NewClient(spec.Instances[2].HostPort(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hcl := healthpb.NewHealthClient(cc)
	var md metadata.MD
	start = time.Now()
	r, err := hcl.Check(ctx, &healthpb.HealthCheckRequest{Service: CallerService}, grpc.Header(&md))
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING || time.Since(start) < 300*time.Millisecond {
		t.Errorf("slow caller's Check: %v %v after %s; want SERVING after 300ms", r, err, time.Since(start))
	}
	// A probe's Check (any other service) stays fast: probes stay green.
	start = time.Now()
	if r, err := hcl.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING || time.Since(start) >= 300*time.Millisecond {
		t.Errorf("slow instance, a probe's Check: %v %v after %s; want SERVING at once", r, err, time.Since(start))
	}
	if got := md.Get("x-cairn-instance"); len(got) != 1 || got[0] != "g-1" {
		t.Errorf("Check header x-cairn-instance %v; want g-1", got)
	}

	// down, by zone: the readiness path fails, callers are served.
	if n, err := ctl.Set(ctx, ModeRequest{Zone: "a", Mode: ModeDown}); err != nil || n != 2 {
		t.Fatalf("set zone a down: %d, %v; want 2", n, err)
	}
	if code, _, _, _ := get(h1, "/ready"); code != 503 {
		t.Errorf("down GET /ready: %d; want 503", code)
	}
	if code, body, _, _ := get(h1, "/"); code != 200 || body != "h-1" {
		t.Errorf("down GET /: %d %q; want 200 h-1", code, body)
	}
	if r, err := hcl.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("down, a probe's Check: %v %v; want NOT_SERVING", r, err)
	}
	if r, err := hcl.Check(ctx, &healthpb.HealthCheckRequest{Service: CallerService}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("down, a caller's Check: %v %v; want SERVING (callers are served)", r, err)
	}
	if code, _, _, _ := get(spec.Instances[1].HostPort(), "/ready"); code != 200 {
		t.Errorf("zone b GET /ready: %d; want 200 (not selected)", code)
	}

	// refuse, by service, then back to ok.
	if n, err := ctl.SetService(ctx, "shop/web", "", ModeRefuse, 0); err != nil || n != 2 {
		t.Fatalf("refuse shop/web: %d, %v", n, err)
	}
	if _, err := net.DialTimeout("tcp", h1, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial a refused instance: %v; want connection refused", err)
	}
	if _, err := ctl.Set(ctx, ModeRequest{All: true, Mode: ModeOK}); err != nil {
		t.Fatal(err)
	}
	if code, body, _, _ := get(h1, "/"); code != 200 || body != "h-1" {
		t.Errorf("after ok: GET /: %d %q", code, body)
	}
	st, err := ctl.Stats(ctx)
	if err != nil || st.Instances != 4 || st.Listening != 4 || st.RSSBytes <= 0 {
		t.Errorf("stats %+v, %v; want 4 instances listening and an RSS", st, err)
	}
	is, err := ctl.Instances(ctx)
	if err != nil || len(is) != 4 || is[0].Served < 3 || is[0].Mode != ModeOK {
		t.Errorf("instances %+v, %v", is, err)
	}

	// Bad requests name the field.
	for _, bad := range []ModeRequest{
		{IDs: []string{"h-1"}, Mode: "sleepy"},
		{IDs: []string{"h-1"}, Mode: ModeSlow},
		{Mode: ModeOK},
		{IDs: []string{"nope"}, Mode: ModeOK},
	} {
		if _, err := ctl.Set(ctx, bad); err == nil || !strings.Contains(err.Error(), "400") {
			t.Errorf("set %+v: %v; want a 400", bad, err)
		}
	}
}

func readTCP(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}

// TestSpecValidate: a bad spec is refused naming the field.
func TestSpecValidate(t *testing.T) {
	ok := Instance{ID: "a", Kind: KindTCP, Addr: "127.11.0.1", Port: 1}
	for _, c := range []struct {
		edit func(*Instance)
		want string
	}{
		{func(i *Instance) { i.ID = "" }, "instances[1].id"},
		{func(i *Instance) { i.Kind = "udp" }, "instances[1].kind"},
		{func(i *Instance) { i.Addr = "here" }, "instances[1].addr"},
		{func(i *Instance) { i.Port = 0 }, "instances[1].port"},
		{func(i *Instance) { i.ID = "b" }, "listens on 127.11.0.1:1 already"},
		{func(i *Instance) { i.ID = "a"; i.Port = 2 }, "appears twice"},
	} {
		other := Instance{ID: "b", Kind: KindTCP, Addr: "127.11.0.1", Port: 1}
		c.edit(&other)
		err := Spec{Instances: []Instance{ok, other}}.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error with %q", other, err, c.want)
		}
	}
}
