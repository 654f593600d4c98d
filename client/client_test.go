package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const noLeader = `{"error": "no leader", "code": "no_leader"}`

// attempt is one request as the server saw it.
type attempt struct {
	method, path, ctype, auth string
	body                      []byte
	idempotencyKey            bool // an Idempotency-Key header was sent
}

// server is an httptest server whose answer to the nth attempt (from 1) is
// answer(n); it records every attempt.
type server struct {
	mu       sync.Mutex
	attempts []attempt
}

func (s *server) seen() []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attempt(nil), s.attempts...)
}

func (s *server) count() int { return len(s.seen()) }

// answers returns an answer function that plays the given answers in turn
// and repeats the last one.
func answers(as ...string) func(n int) (int, string) {
	return func(n int) (int, string) {
		a := as[min(n, len(as))-1]
		var code int
		var body string
		if _, err := fmt.Sscanf(a, "%d", &code); err != nil {
			panic(a)
		}
		if len(a) > 4 {
			body = a[4:]
		}
		return code, body
	}
}

// newServer starts a server answering with answer and returns a client for
// it whose retry budget is retryFor.
func newServer(t *testing.T, retryFor time.Duration, answer func(n int) (int, string)) (*client.Client, *server) {
	t.Helper()
	s := &server{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading the request body: %v", err)
		}
		s.mu.Lock()
		_, key := r.Header["Idempotency-Key"]
		s.attempts = append(s.attempts, attempt{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), b, key})
		n := len(s.attempts)
		s.mu.Unlock()
		code, body := answer(n)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	c.RetryFor = retryFor
	return c, s
}

// TestRetriesNoLeader: 503 twice, then 200 → success after 3 attempts,
// with the default retry budget (RetryFor 0).
func TestRetriesNoLeader(t *testing.T) {
	c, s := newServer(t, 0, answers("503 "+noLeader, "503 "+noLeader, `200 {"revision": 7, "services": ["shop/web"]}`))
	r, err := c.Apply(t.Context(), []byte("name: web\n"))
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if r.Revision != 7 || len(r.Services) != 1 || r.Services[0] != "shop/web" {
		t.Errorf("Apply = %+v", r)
	}
	if n := s.count(); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
}

// TestRetriesResendTheBody: every attempt of a write carries the same
// body, content type and token.
func TestRetriesResendTheBody(t *testing.T) {
	reg := wire.Registration{ID: "i-1", Addresses: []string{"10.0.0.1"}, Ports: map[string]int{"http": 8080}, Zone: "z1"}
	regJSON, err := json.Marshal(reg)
	if err != nil {
		t.Fatal(err)
	}
	yaml := []byte("namespace: shop\nname: web\nports:\n  http: {}\n")
	key := wire.InstanceKey{Namespace: "shop", Service: "web", ID: "i-1"}
	for _, tc := range []struct {
		name        string
		call        func(*client.Client) error
		path, ctype string
		body        []byte
	}{
		{"apply yaml", func(c *client.Client) error { _, err := c.Apply(t.Context(), yaml); return err },
			"/v1/apply", "application/yaml", yaml},
		{"register json", func(c *client.Client) error { _, err := c.Register(t.Context(), "shop", "web", reg); return err },
			"/v1/services/shop/web/instances", "application/json", regJSON},
		{"renew", func(c *client.Client) error { _, err := c.Renew(t.Context(), key, 42); return err },
			"/v1/services/shop/web/instances/i-1/renew", "application/json", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := newServer(t, time.Minute, answers("503 "+noLeader, "503 "+noLeader, "503 "+noLeader, "200 {}"))
			if err := tc.call(c); err != nil {
				t.Fatal(err)
			}
			seen := s.seen()
			if len(seen) != 4 {
				t.Fatalf("%d attempts, want 4", len(seen))
			}
			for i, a := range seen {
				if a.method != http.MethodPost || a.path != tc.path || a.ctype != tc.ctype || a.auth != "Bearer s3cret" {
					t.Errorf("attempt %d: %s %s, Content-Type %q, Authorization %q", i+1, a.method, a.path, a.ctype, a.auth)
				}
				if a.idempotencyKey {
					t.Errorf("attempt %d sent an Idempotency-Key header", i+1)
				}
				if tc.body != nil && !bytes.Equal(a.body, tc.body) {
					t.Errorf("attempt %d: body %q, want %q", i+1, a.body, tc.body)
				}
				if len(a.body) == 0 || !bytes.Equal(a.body, seen[0].body) {
					t.Errorf("attempt %d: body %q, the first attempt's %q", i+1, a.body, seen[0].body)
				}
			}
		})
	}
}

// TestNoRetryOnOtherAnswers: only 503 is retried; any other error answer
// is returned after one attempt.
func TestNoRetryOnOtherAnswers(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusBadRequest, "invalid_argument"},
		{http.StatusUnauthorized, "unauthenticated"},
		{http.StatusForbidden, "forbidden_address"},
		{http.StatusNotFound, "not_found"},
		{http.StatusConflict, "fenced"},
		{http.StatusInternalServerError, "internal"},
		{http.StatusBadGateway, "unknown"},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			body := fmt.Sprintf(`{"error": "nope", "code": %q}`, tc.code)
			if tc.code == "unknown" {
				body = "bad gateway"
			}
			c, s := newServer(t, time.Minute, answers(fmt.Sprintf("%d %s", tc.status, body), "200 {}"))
			_, err := c.Register(t.Context(), "shop", "web", wire.Registration{ID: "i-1"})
			var e *client.Error
			if !errors.As(err, &e) || e.Status != tc.status || e.Code != tc.code {
				t.Fatalf("Register: %v; want a %d %s *client.Error", err, tc.status, tc.code)
			}
			if client.IsRetryable(err) {
				t.Errorf("IsRetryable(%v) is true", err)
			}
			if n := s.count(); n != 1 {
				t.Errorf("%d attempts, want 1", n)
			}
		})
	}
}

// TestRetryBudgetSpent: when RetryFor has passed, the last 503 is
// returned as a *client.Error.
func TestRetryBudgetSpent(t *testing.T) {
	const budget = 300 * time.Millisecond
	c, s := newServer(t, budget, func(n int) (int, string) {
		return http.StatusServiceUnavailable, fmt.Sprintf(`{"error": "no leader (attempt %d)", "code": "no_leader"}`, n)
	})
	start := time.Now()
	_, err := c.Members(t.Context())
	took := time.Since(start)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Code != "no_leader" {
		t.Fatalf("Members: %v; want a 503 no_leader *client.Error", err)
	}
	n := s.count()
	if n < 2 {
		t.Errorf("%d attempts in %s; want retries", n, took)
	}
	if want := fmt.Sprintf("no leader (attempt %d)", n); e.Message != want {
		t.Errorf("error %q, want the last attempt's %q", e.Message, want)
	}
	if !client.IsRetryable(err) {
		t.Errorf("IsRetryable(%v) is false", err)
	}
	// The last retry starts when the budget is spent, not later.
	if took < budget || took > budget+5*time.Second {
		t.Errorf("gave up after %s with a budget of %s", took, budget)
	}
}

// TestRetryDisabled: a negative RetryFor sends each request once.
func TestRetryDisabled(t *testing.T) {
	c, s := newServer(t, -1, answers("503 "+noLeader, "200 []"))
	_, err := c.Services(t.Context())
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("Services: %v; want the 503", err)
	}
	if n := s.count(); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

// TestCancelStopsRetrying: cancelling ctx stops the retries at once, even
// in the middle of a backoff wait (stretched here to up to a minute).
func TestCancelStopsRetrying(t *testing.T) {
	first := make(chan struct{})
	var once sync.Once
	c, s := newServer(t, time.Hour, func(n int) (int, string) {
		once.Do(func() { close(first) })
		return http.StatusServiceUnavailable, noLeader
	})
	client.StretchBackoff(c, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// Cancel shortly after the first attempt, once its answer is in and
	// the client waits.
	cancelledAt := make(chan time.Time, 1)
	go func() {
		<-first
		time.AfterFunc(100*time.Millisecond, func() {
			cancelledAt <- time.Now()
			cancel()
		})
	}()
	_, err := c.Register(ctx, "shop", "web", wire.Registration{ID: "i-1"})
	returned := time.Now()
	cancelled := <-cancelledAt
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Register: %v; want context.Canceled", err)
	}
	if client.IsRetryable(err) {
		t.Errorf("IsRetryable(%v) is true", err)
	}
	if d := returned.Sub(cancelled); d > time.Second {
		t.Errorf("returned %s after the cancel", d)
	}
	if n := s.count(); n > 2 {
		t.Errorf("%d attempts; the first cancelled the context", n)
	}
}

// TestDeadlineStopsRetrying: ctx's deadline ends the retries, in the
// middle of a backoff wait (stretched here to up to a minute) and long
// before RetryFor.
func TestDeadlineStopsRetrying(t *testing.T) {
	c, s := newServer(t, time.Hour, answers("503 "+noLeader))
	client.StretchBackoff(c, time.Minute)
	const deadline = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	_, err := c.Endpoints(ctx, "shop", "web")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Endpoints: %v; want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > deadline+time.Second {
		t.Errorf("returned after %s with a deadline of %s", d, deadline)
	}
	if s.count() < 1 {
		t.Error("no attempt")
	}
}

// TestDeadlineDuringAttemptIsNotRetried: an attempt that ctx's deadline
// cuts short is not sent again.
func TestDeadlineDuringAttemptIsNotRetried(t *testing.T) {
	var mu sync.Mutex
	attempts := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts++
		mu.Unlock()
		<-r.Context().Done() // never answers
	}))
	defer ts.Close()
	c, err := client.New(ts.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	c.RetryFor = time.Minute
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Members(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Members: %v; want context.DeadlineExceeded", err)
	}
	ts.Close() // waits for the handler
	mu.Lock()
	defer mu.Unlock()
	if attempts != 1 {
		t.Errorf("%d attempts, want 1", attempts)
	}
}

// TestRetriesRefusedConnection: a refused connection is retried until
// the budget is spent.
func TestRetriesRefusedConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(addr, "")
	if err != nil {
		t.Fatal(err)
	}
	const budget = 250 * time.Millisecond
	c.RetryFor = budget
	start := time.Now()
	_, err = c.Members(t.Context())
	took := time.Since(start)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Members: %v; want connection refused", err)
	}
	if !client.IsRetryable(err) {
		t.Errorf("IsRetryable(%v) is false", err)
	}
	if took < budget {
		t.Errorf("gave up after %s; want retries for %s", took, budget)
	}
}

// dropFirst is a listener that closes the first drop connections it
// accepts without reading them.
type dropFirst struct {
	net.Listener
	drop int

	mu      sync.Mutex
	accepts int
}

func (l *dropFirst) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		l.accepts++
		drop := l.accepts <= l.drop
		l.mu.Unlock()
		if !drop {
			return conn, nil
		}
		_ = conn.Close()
	}
}

// TestRetriesDroppedConnection: a connection closed before an answer (a
// server that dies under the request) is retried, body and all.
func TestRetriesDroppedConnection(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"instance_id": "i-1", "incarnation": 3, "created": true}`)
	}))
	l := &dropFirst{Listener: ts.Listener, drop: 2}
	ts.Listener = l
	ts.Start()
	defer ts.Close()
	c, err := client.New(ts.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	c.RetryFor = time.Minute
	reg := wire.Registration{ID: "i-1", Addresses: []string{"10.0.0.1"}, Ports: map[string]int{"http": 80}}
	r, err := c.Register(t.Context(), "shop", "web", reg)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	if r.Incarnation != 3 || !r.Created {
		t.Errorf("Register = %+v", r)
	}
	want, _ := json.Marshal(reg)
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || !bytes.Equal(bodies[0], want) {
		t.Errorf("the handler saw %q, want one %q", bodies, want)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.accepts != 3 {
		t.Errorf("%d connections, want 3 (2 dropped)", l.accepts)
	}
}

// TestReadyDoesNotRetry: /readyz's 503 means not ready.
func TestReadyDoesNotRetry(t *testing.T) {
	c, s := newServer(t, time.Minute, answers(`503 {"status": "not ready"}`, `200 {"status": "ready"}`))
	if c.Ready(t.Context()) {
		t.Error("Ready is true on a 503")
	}
	if n := s.count(); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
	if !c.Ready(t.Context()) {
		t.Error("Ready is false on a 200")
	}
}

// TestJoinRetry: JoinRetry goes on through 503s, reporting each, and
// stops at any other error.
func TestJoinRetry(t *testing.T) {
	m := wire.Member{NodeID: "n2", RaftAddr: "10.0.0.2:8482", HTTPAddr: "10.0.0.2:8480"}
	t.Run("503 then 200", func(t *testing.T) {
		c, s := newServer(t, 0, answers("503 "+noLeader, "503 "+noLeader, "200 {}"))
		var reported []error
		if err := c.JoinRetry(t.Context(), m, func(err error) { reported = append(reported, err) }); err != nil {
			t.Fatalf("JoinRetry: %v", err)
		}
		if n := s.count(); n != 3 || len(reported) != 2 {
			t.Errorf("%d attempts, %d reported; want 3 and 2", n, len(reported))
		}
		for _, a := range s.seen() {
			var got wire.Member
			if err := json.Unmarshal(a.body, &got); err != nil || got != m {
				t.Errorf("%s %s body %q, want %+v", a.method, a.path, a.body, m)
			}
		}
	})
	t.Run("400", func(t *testing.T) {
		c, s := newServer(t, 0, answers(`400 {"error": "bad", "code": "invalid_argument"}`))
		err := c.JoinRetry(t.Context(), m, func(err error) { t.Errorf("reported %v", err) })
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
			t.Fatalf("JoinRetry: %v; want the 400", err)
		}
		if n := s.count(); n != 1 {
			t.Errorf("%d attempts, want 1", n)
		}
	})
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestIsRetryable(t *testing.T) {
	refused := &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"503", &client.Error{Status: 503, Code: "no_leader"}, true},
		{"wrapped 503", fmt.Errorf("apply: %w", &client.Error{Status: 503, Code: "no_leader"}), true},
		{"409", &client.Error{Status: 409, Code: "fenced"}, false},
		{"500", &client.Error{Status: 500, Code: "internal"}, false},
		{"refused", refused, true},
		{"reset", &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}, true},
		{"eof", &url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, true},
		{"body cut short", fmt.Errorf("reading answer of GET /v1/members: %w", io.ErrUnexpectedEOF), true},
		{"canceled", &url.Error{Op: "Post", URL: "http://x", Err: context.Canceled}, false},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"timeout", &url.Error{Op: "Post", URL: "http://x", Err: timeoutErr{}}, false},
		{"bad answer", errors.New("decoding answer of GET /v1/members: invalid character"), false},
		{"bad scheme", &url.Error{Op: "Get", URL: "ftp://x", Err: errors.New(`unsupported protocol scheme "ftp"`)}, false},
	} {
		if got := client.IsRetryable(tc.err); got != tc.want {
			t.Errorf("%s: IsRetryable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestDNSErrorIsNotRetried: a name that does not resolve fails at once.
func TestDNSErrorIsNotRetried(t *testing.T) {
	err := &url.Error{Op: "Get", URL: "http://no-such-host.invalid/", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "no-such-host.invalid", IsNotFound: true}}}
	if client.IsRetryable(err) {
		t.Fatal("a DNS failure is retryable")
	}
}

// TestRegisterBody: what a registration sends — replaces when set, and
// no weight or lease_ttl when left zero (an explicit 0 is refused by the
// server: the zero value must mean "the default" on the wire too).
func TestRegisterBody(t *testing.T) {
	for _, tc := range []struct {
		name        string
		reg         wire.Registration
		want, never []string
	}{
		{"defaults", wire.Registration{ID: "i-1"}, nil, []string{`"weight"`, `"lease_ttl"`, `"replaces"`}},
		{"explicit", wire.Registration{ID: "i-1", Weight: 7, LeaseTTL: wire.Duration(time.Minute), Replaces: 42},
			[]string{`"weight":7`, `"lease_ttl":"1m0s"`, `"replaces":42`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := newServer(t, time.Minute, answers(`201 {"incarnation": 43, "created": true}`))
			r, err := c.Register(t.Context(), "shop", "web", tc.reg)
			if err != nil || r.Incarnation != 43 || !r.Created {
				t.Fatalf("Register = %+v, %v", r, err)
			}
			body := string(s.seen()[0].body)
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("body %s lacks %s", body, w)
				}
			}
			for _, n := range tc.never {
				if strings.Contains(body, n) {
					t.Errorf("body %s carries %s", body, n)
				}
			}
		})
	}
}

// TestTLSConfigShared: clients made from one *tls.Config (as a server
// makes its calls to other servers) may run at once: each transport
// writes its ALPN protocols into its own copy (run under -race).
func TestTLSConfigShared(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	tc := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tc.NextProtos = nil
	var wg sync.WaitGroup
	for range 4 {
		cl, err := client.NewTLS(srv.URL, "", tc)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			if !cl.Ready(t.Context()) {
				t.Error("not ready over TLS")
			}
		}()
	}
	wg.Wait()
	if len(tc.NextProtos) != 0 {
		t.Errorf("the caller's config was written to: NextProtos %v", tc.NextProtos)
	}
}

// TestConsistentRead: Consistent sends ?consistent=true on Service and
// Endpoints, and keeps it on the attempts a 503 retries; without it no
// query is sent.
func TestConsistentRead(t *testing.T) {
	var mu sync.Mutex
	var seen []string // path?query of each request
	n := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+"?"+r.URL.RawQuery)
		n++
		first := n%2 == 1
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if first { // every other request: no leader, retried
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, noLeader)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/endpoints") {
			_, _ = io.WriteString(w, `[{"instance_id": "web-1", "incarnation": 3}]`)
			return
		}
		_, _ = io.WriteString(w, `{"namespace": "shop", "name": "web"}`)
	}))
	defer ts.Close()
	c, err := client.New(ts.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	client.StretchBackoff(c, time.Millisecond)
	ctx := t.Context()
	eps, err := c.Endpoints(ctx, "shop", "web", client.Consistent())
	if err != nil || len(eps) != 1 || eps[0].Incarnation != 3 {
		t.Fatalf("Endpoints(Consistent): %+v, %v", eps, err)
	}
	if _, err := c.Service(ctx, "shop", "web", client.Consistent()); err != nil {
		t.Fatalf("Service(Consistent): %v", err)
	}
	if _, err := c.Endpoints(ctx, "shop", "web"); err != nil {
		t.Fatalf("Endpoints: %v", err)
	}
	if _, err := c.Service(ctx, "shop", "web"); err != nil {
		t.Fatalf("Service: %v", err)
	}
	want := []string{
		"/v1/services/shop/web/endpoints?consistent=true", "/v1/services/shop/web/endpoints?consistent=true",
		"/v1/services/shop/web?consistent=true", "/v1/services/shop/web?consistent=true",
		"/v1/services/shop/web/endpoints?", "/v1/services/shop/web/endpoints?",
		"/v1/services/shop/web?", "/v1/services/shop/web?",
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
