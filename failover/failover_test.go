package failover_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/failover"
	"github.com/cairn-sd/cairn/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newSignal(t *testing.T, src string, clk *clock) *failover.Signal {
	t.Helper()
	s, err := failover.New(failover.Config{Source: src, Region: "a", Now: clk.Now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// scopes describes the failovers held at now: "scope=state".
func scopes(s *failover.Signal, now time.Time) string {
	var out []string
	for _, e := range s.Failovers(now) {
		out = append(out, e.Scope()+"="+e.State())
	}
	return strings.Join(out, ", ")
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A file's failovers of this server's region are in force while it
// names them; one it no longer names returns (its share rising with
// the time since); one for another region is ignored; a file that does
// not parse changes nothing; no file says no failover.
func TestFileSignal(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	path := filepath.Join(t.TempDir(), "failover.yaml")
	s := newSignal(t, path, clk)
	ctx := t.Context()
	s.Read(ctx)
	if got := scopes(s, clk.Now()); got != "" {
		t.Fatalf("no file: %q, want no failover", got)
	}
	write(t, path, "failovers:\n  - {from: a, to: b, service: shop/web}\n  - {from: c, to: b}\n")
	s.Read(ctx)
	select {
	case <-s.Changed():
	default:
		t.Fatal("a failover started and Changed was not signalled")
	}
	if got := scopes(s, clk.Now()); got != "region a (failover to b) of shop/web=evacuated" {
		t.Fatalf("signalled: %q", got)
	}
	if st := s.Status(); len(st.Ignored) != 1 || !strings.Contains(st.Ignored[0], "from c") || st.Error != "" {
		t.Fatalf("status %+v, want c's entry ignored and no error", st)
	}
	// Junk: the last signal read stays in force, and the error is told.
	write(t, path, "failovers:\n  - {from: a, to: a}\n")
	s.Read(ctx)
	if got := scopes(s, clk.Now()); got != "region a (failover to b) of shop/web=evacuated" {
		t.Fatalf("after a bad signal: %q, want the last one read", got)
	}
	if st := s.Status(); !strings.Contains(st.Error, "failovers[0].to") {
		t.Fatalf("error %q, want it to name failovers[0].to", st.Error)
	}
	write(t, path, "failovers: [{from: a, to: b, service: shop/web, colour: red}]\n")
	s.Read(ctx)
	if st := s.Status(); !strings.Contains(st.Error, "colour") {
		t.Fatalf("error %q, want it to name the unknown field", st.Error)
	}
	// Gone from the file: it returns, from its end.
	write(t, path, "failovers: []\n")
	s.Read(ctx)
	clk.add(90 * time.Second)
	fos := s.Failovers(clk.Now())
	if len(fos) != 1 || fos[0].State() != "returning" || fos[0].Returned.D() != 90*time.Second ||
		fos[0].Share(5*time.Minute) != 0.4 {
		t.Fatalf("after its end: %+v, want returning for 90s, share 0.4 of a 5m shift_back (a step of 0.1 at once, and one every 30s)", fos)
	}
	// The file removed: no failover, the return goes on.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s.Read(ctx)
	if got := scopes(s, clk.Now()); got != "region a (failover to b) of shop/web=returning" {
		t.Fatalf("file removed: %q", got)
	}
	// Named again while it returns: in force again.
	write(t, path, `{"failovers": [{"from": "a", "to": "b", "service": "shop/web"}]}`)
	s.Read(ctx)
	if got := scopes(s, clk.Now()); got != "region a (failover to b) of shop/web=evacuated" {
		t.Fatalf("named again: %q", got)
	}
}

// A URL's signal: 200 is read, 404 says none, anything else changes
// nothing. Run reads it until its context ends.
func TestURLSignal(t *testing.T) {
	var (
		mu     sync.Mutex
		status = http.StatusOK
		body   = "failovers: [{from: a, to: b}]"
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	set := func(st int, b string) { mu.Lock(); status, body = st, b; mu.Unlock() }
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	s := newSignal(t, srv.URL, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("the URL's failover was not read within 10s")
	}
	if got := scopes(s, clk.Now()); got != "region a (failover to b)=evacuated" {
		t.Fatalf("from the URL: %q", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	set(http.StatusInternalServerError, "")
	s.Read(t.Context())
	if got, st := scopes(s, clk.Now()), s.Status(); got != "region a (failover to b)=evacuated" || !strings.Contains(st.Error, "500") {
		t.Fatalf("after a 500: %q (error %q), want the last one read, and the error", got, st.Error)
	}
	set(http.StatusNotFound, "")
	s.Read(t.Context())
	if got := scopes(s, clk.Now()); got != "region a (failover to b)=returning" {
		t.Fatalf("after a 404: %q, want it ended", got)
	}
}

// Parse checks each entry as the API checks a failover, naming it.
func TestParse(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"failovers: [{from: a, to: b, service: web}]", "failovers[0].service"},
		{"failovers: [{from: a, to: B}]", "failovers[0].to"},
		{"failovers: [{to: b}]", "failovers[0].from"},
		{"failovers: [{from: a, to: b}, {from: a, to: c}]", "failovers[1] names the scope of failovers[0]"},
		{"nonsense: 1", "nonsense"},
		{"failovers: [" + strings.Repeat("{from: a, to: b, service: shop/x},", failover.MaxFailovers) + "{from: a, to: b}]", "at most 64"},
	} {
		if _, err := failover.Parse([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %q", tt.in, err, tt.want)
		}
	}
	reqs, err := failover.Parse([]byte("failovers:\n- {from: a, to: b, service: shop/web, reason: fire}\n"))
	if err != nil || len(reqs) != 1 || reqs[0] != (wire.EvacuateRequest{Region: "a", To: "b", Namespace: "shop", Service: "web", Reason: "fire"}) {
		t.Fatalf("%+v %v", reqs, err)
	}
}
