// Package client is a Go client for cairn's HTTP API, used by the CLI, by
// servers joining a cluster and by tests.
//
// It links only the wire types and the retry timing (internal/backoff):
// never raft, bolt, Prometheus or server code, so that a program that
// registers itself pulls in nothing else (TestLean checks the graph). A
// Client is safe for concurrent use.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cairn-sd/cairn/internal/backoff"
	"github.com/cairn-sd/cairn/wire"
)

// Error is an error answer from the API.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Code) }

// DefaultRetryFor is the retry budget of a Client whose RetryFor is 0.
const DefaultRetryFor = 10 * time.Second

// Backoff between attempts (package backoff: full jitter, each wait
// uniform in [0, ceiling), the ceiling doubling from the minimum to the
// maximum): a request's retries from 100ms to 2s; JoinRetry's attempts
// from 200ms to 5s.
const (
	retryMin     = 100 * time.Millisecond
	retryMax     = 2 * time.Second
	joinRetryMin = 200 * time.Millisecond
	joinRetryMax = 5 * time.Second
)

// Client talks to one cairn server. It is safe for concurrent use.
//
// A request that gets 503 (no leader, during an election) or no answer
// (connection refused or reset) is sent again, with the same body, with
// exponential backoff and full jitter (each wait uniform in [0, ceiling),
// the ceiling doubling from 100ms to 2s), until it gets another answer, the
// retry budget RetryFor is spent or ctx is done: every write of the API is
// idempotent (a registration is content-based, a mutation is fenced by
// incarnation). A cancelled context or a deadline is never retried.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	// retryWait times retry's waits; tests stretch it.
	retryWait backoff.Config

	// RetryFor bounds how long a request is retried after its first
	// failure: no retry starts later than RetryFor after it. 0 means
	// DefaultRetryFor; a negative value disables retries. Set it before
	// the client is used.
	RetryFor time.Duration
}

// New returns a client for the server at addr ("http://host:port" or
// "host:port"). An empty token sends none.
func New(addr, token string) (*Client, error) { return NewTLS(addr, token, nil) }

// NewTLS returns a client that speaks https with tc ("https://host:port"
// or "host:port"), or, for a nil tc, what addr's scheme says (plain http
// for "host:port", https with the system's roots for "https://").
func NewTLS(addr, token string, tc *tls.Config) (*Client, error) {
	if !strings.Contains(addr, "://") {
		if tc != nil {
			addr = "https://" + addr
		} else {
			addr = "http://" + addr
		}
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("address %q is not a URL such as http://127.0.0.1:8480", addr)
	}
	if u.Scheme == "http" && tc != nil {
		return nil, fmt.Errorf("address %q is plain http, but TLS is configured: use https://", addr)
	}
	// A transport of its own, keeping enough idle connections for many
	// concurrent callers (http.DefaultTransport keeps 2 a host, so a busy
	// caller would open a connection a request).
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	// A copy: a Transport writes its ALPN protocols into its config, and
	// callers share theirs between clients.
	tr.TLSClientConfig = tc.Clone()
	return &Client{base: u, token: token, hc: &http.Client{Timeout: 30 * time.Second, Transport: tr},
		retryWait: backoff.Config{Min: retryMin, Max: retryMax}}, nil
}

// noRetry is the budget of a request that is sent once.
const noRetry = -1

func (c *Client) retryFor() time.Duration {
	if c.RetryFor == 0 {
		return DefaultRetryFor
	}
	return c.RetryFor
}

// do sends a request, retrying it within the client's retry budget.
func (c *Client) do(ctx context.Context, method, path, ctype string, body []byte, out any) error {
	return c.retry(ctx, c.retryFor(), method, path, ctype, body, out)
}

// retry sends a request until it succeeds, fails for good (see
// IsRetryable), budget has passed since its first failure (a negative
// budget: after one attempt) or ctx is done. It returns the last attempt's
// error, or, when ctx ends the retries, ctx's error.
func (c *Client) retry(ctx context.Context, budget time.Duration, method, path, ctype string, body []byte, out any) error {
	var deadline, first time.Time
	wait := backoff.New(c.retryWait)
	for attempt := 1; ; attempt++ {
		err := c.once(ctx, method, path, ctype, body, out)
		if err == nil || budget < 0 || !IsRetryable(err) {
			if err != nil && attempt > 1 {
				return fmt.Errorf("%w (after %d attempts over %s)", err, attempt, time.Since(first).Round(time.Millisecond))
			}
			return err
		}
		if ctx.Err() != nil {
			return stopped(ctx, method, path, attempt, err)
		}
		if attempt == 1 {
			first = time.Now()
			deadline = first.Add(budget)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w (after %d attempts over %s)", err, attempt, time.Since(first).Round(time.Millisecond))
		}
		t := time.NewTimer(min(wait.Next(), left))
		select {
		case <-ctx.Done():
			t.Stop()
			return stopped(ctx, method, path, attempt, err)
		case <-t.C:
		}
	}
}

// stopped is the error of a request whose retries ctx ended: ctx's error,
// with the last attempt's for information.
func stopped(ctx context.Context, method, path string, attempts int, last error) error {
	return fmt.Errorf("%s %s: %w (after %d attempts; the last: %v)", method, path, ctx.Err(), attempts, last)
}

// once sends a request once.
func (c *Client) once(ctx context.Context, method, path, ctype string, body []byte, out any) error {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	if i := strings.IndexByte(u.Path, '?'); i >= 0 {
		u.RawQuery, u.Path = u.Path[i+1:], u.Path[:i]
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body) // a new reader per attempt: the body is sent whole every time
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// Every request of the API is idempotent: let the transport resend a
	// write, too, on a kept-alive connection the server had closed. (An
	// empty value is not sent on the wire.)
	req.Header["Idempotency-Key"] = nil
	resp, err := c.hc.Do(req)
	if err != nil {
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) {
			return fmt.Errorf("%s does not speak TLS (is it an http:// address?): %w", c.base.Host, err)
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e wire.Error
		if resp.StatusCode == http.StatusBadRequest && bytes.Contains(b, []byte("HTTP request to an HTTPS server")) {
			return &Error{Status: resp.StatusCode, Code: "tls_required",
				Message: fmt.Sprintf("%s speaks https only: use an https:// address and the CA that signed its certificate (--ca-file)", c.base.Host)}
		}
		if json.Unmarshal(b, &e) != nil || e.Code == "" {
			return &Error{Status: resp.StatusCode, Code: "unknown", Message: strings.TrimSpace(string(b))}
		}
		return &Error{Status: resp.StatusCode, Code: e.Code, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding answer of %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) json(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = b
	}
	return c.do(ctx, method, path, "application/json", body, out)
}

// ApplyResult is the answer to Apply.
type ApplyResult struct {
	Revision uint64   `json:"revision"`
	Services []string `json:"services"`
}

// Apply sends service definitions as YAML (one service per document).
func (c *Client) Apply(ctx context.Context, yaml []byte) (ApplyResult, error) {
	var r ApplyResult
	err := c.do(ctx, http.MethodPost, "/v1/apply", "application/yaml", yaml, &r)
	return r, err
}

func svcPath(ns, svc string) string {
	return "/v1/services/" + url.PathEscape(ns) + "/" + url.PathEscape(svc)
}

func instPath(k wire.InstanceKey) string {
	return svcPath(k.Namespace, k.Service) + "/instances/" + url.PathEscape(k.ID)
}

// Register registers an instance of ns/svc. A zero Weight or LeaseTTL is
// left out of the request and takes the default. To change a live
// registration without a RegistrationID, set Replaces to the incarnation
// being replaced (the one this client was last answered); otherwise the
// server refuses it with a 409 *Error of code "fenced" naming the current
// incarnation, so that a late retry can never overwrite a newer one. A
// retried request returns the committed record, whatever it names.
func (c *Client) Register(ctx context.Context, ns, svc string, reg wire.Registration) (wire.Registered, error) {
	var r wire.Registered
	err := c.json(ctx, http.MethodPost, svcPath(ns, svc)+"/instances", reg, &r)
	return r, err
}

func (c *Client) mutate(ctx context.Context, verb string, k wire.InstanceKey, req wire.MutateRequest) (wire.Instance, error) {
	var in wire.Instance
	err := c.json(ctx, http.MethodPost, instPath(k)+"/"+verb, req, &in)
	return in, err
}

// Renew renews an instance's lease.
func (c *Client) Renew(ctx context.Context, k wire.InstanceKey, inc uint64) (wire.Instance, error) {
	return c.mutate(ctx, "renew", k, wire.MutateRequest{Incarnation: inc})
}

// Drain starts an instance's drain.
func (c *Client) Drain(ctx context.Context, k wire.InstanceKey, inc uint64) (wire.Instance, error) {
	return c.mutate(ctx, "drain", k, wire.MutateRequest{Incarnation: inc})
}

// Deregister removes an instance.
func (c *Client) Deregister(ctx context.Context, k wire.InstanceKey, inc uint64) (wire.Instance, error) {
	return c.mutate(ctx, "deregister", k, wire.MutateRequest{Incarnation: inc})
}

// ForceDrain is Drain past the service's disruption budget: where Drain
// gets a 429 *Error of code "disruption_budget", ForceDrain goes through
// and the override is in the audit trail.
func (c *Client) ForceDrain(ctx context.Context, k wire.InstanceKey, inc uint64) (wire.Instance, error) {
	return c.mutate(ctx, "drain", k, wire.MutateRequest{Incarnation: inc, Force: true})
}

// ForceDeregister is Deregister past the service's disruption budget.
func (c *Client) ForceDeregister(ctx context.Context, k wire.InstanceKey, inc uint64) (wire.Instance, error) {
	return c.mutate(ctx, "deregister", k, wire.MutateRequest{Incarnation: inc, Force: true})
}

// Report sends a self-report.
func (c *Client) Report(ctx context.Context, k wire.InstanceKey, inc uint64, ready bool, deps map[string]wire.DependencyState) (wire.Instance, error) {
	return c.mutate(ctx, "report", k, wire.MutateRequest{Incarnation: inc, Ready: &ready, Dependencies: deps})
}

// Services lists the services the token may read.
func (c *Client) Services(ctx context.Context) ([]wire.ServiceSummary, error) {
	var out []wire.ServiceSummary
	err := c.json(ctx, http.MethodGet, "/v1/services", nil, &out)
	return out, err
}

// ReadOption changes how the server answers a read (Service,
// Endpoints).
type ReadOption func(url.Values)

// Consistent asks for a linearizable read (?consistent=true): the server
// asked forwards it to the leader, which answers once a quorum has
// confirmed it still leads, so the answer holds every write acknowledged
// before the read was sent. It lists the store's instances only; the
// verdicts, weights and status table version in it are the leader's. A
// leader that cannot confirm its leadership, or a node that knows no
// leader, answers 503 no_leader, which the client retries as any 503.
func Consistent() ReadOption { return func(q url.Values) { q.Set("consistent", "true") } }

// readPath is path with the query opts ask for.
func readPath(path string, opts []ReadOption) string {
	if len(opts) == 0 {
		return path
	}
	q := url.Values{}
	for _, o := range opts {
		o(q)
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// Service returns a definition and its view; Consistent makes it a
// linearizable read.
func (c *Client) Service(ctx context.Context, ns, svc string, opts ...ReadOption) (wire.ServiceDetail, error) {
	var out wire.ServiceDetail
	err := c.json(ctx, http.MethodGet, readPath(svcPath(ns, svc), opts), nil, &out)
	return out, err
}

// Endpoints lists a service's endpoints; Consistent makes it a
// linearizable read.
func (c *Client) Endpoints(ctx context.Context, ns, svc string, opts ...ReadOption) ([]wire.Endpoint, error) {
	var out []wire.Endpoint
	err := c.json(ctx, http.MethodGet, readPath(svcPath(ns, svc)+"/endpoints", opts), nil, &out)
	return out, err
}

// Subscribers returns which store revision of a service's assignments
// the answering server's xDS subscribers hold, and how many are behind.
func (c *Client) Subscribers(ctx context.Context, ns, svc string) (wire.XDSSubscribers, error) {
	var out wire.XDSSubscribers
	err := c.json(ctx, http.MethodGet, svcPath(ns, svc)+"/subscribers", nil, &out)
	return out, err
}

// Rollout returns how far a service's newest rollout has come: its
// live instances, the latest set marked and counted (wire.Rollout).
func (c *Client) Rollout(ctx context.Context, ns, svc string) (wire.Rollout, error) {
	var out wire.Rollout
	err := c.json(ctx, http.MethodGet, svcPath(ns, svc)+"/rollout", nil, &out)
	return out, err
}

// Events returns a service's audit trail, oldest first.
func (c *Client) Events(ctx context.Context, ns, svc string, limit int) ([]wire.Event, error) {
	var out []wire.Event
	err := c.json(ctx, http.MethodGet, fmt.Sprintf("%s/events?limit=%d", svcPath(ns, svc), limit), nil, &out)
	return out, err
}

// Replay asks the node what it told a caller about a service at a time
// of the past (q.At, or q.Revision with q.Digest when a version is
// known), and why: GET /v1/services/{ns}/{svc}/view.
func (c *Client) Replay(ctx context.Context, q wire.ReplayQuery) (wire.Replay, error) {
	v := url.Values{}
	switch {
	case q.Revision != 0 && q.Digest != "":
		v.Set("version", strconv.FormatUint(q.Revision, 10)+"-"+q.Digest)
	case q.Revision != 0:
		v.Set("revision", strconv.FormatUint(q.Revision, 10))
	default:
		v.Set("at", q.At.UTC().Format(time.RFC3339Nano))
	}
	for k, x := range map[string]string{"region": q.Region, "zone": q.Zone, "instance": q.Instance} {
		if x != "" {
			v.Set(k, x)
		}
	}
	var out wire.Replay
	err := c.json(ctx, http.MethodGet, svcPath(q.Namespace, q.Service)+"/view?"+v.Encode(), nil, &out)
	return out, err
}

// Status returns the node's own view: id, raft state, leader, revision.
func (c *Client) Status(ctx context.Context) (wire.Status, error) {
	var out wire.Status
	err := c.json(ctx, http.MethodGet, "/v1/status", nil, &out)
	return out, err
}

// Members lists the cluster's servers.
func (c *Client) Members(ctx context.Context) ([]wire.Member, error) {
	var out []wire.Member
	err := c.json(ctx, http.MethodGet, "/v1/members", nil, &out)
	return out, err
}

// Join adds a server to the cluster.
func (c *Client) Join(ctx context.Context, m wire.Member) error {
	return c.join(ctx, c.retryFor(), m)
}

func (c *Client) join(ctx context.Context, budget time.Duration, m wire.Member) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return c.retry(ctx, budget, http.MethodPost, "/v1/members", "application/json", body, nil)
}

// Leave removes a server from the cluster.
func (c *Client) Leave(ctx context.Context, nodeID string) error {
	return c.json(ctx, http.MethodDelete, "/v1/members/"+url.PathEscape(nodeID), nil, nil)
}

// Hostname is the host of the server's address, without its port.
func (c *Client) Hostname() string { return c.base.Hostname() }

// Close releases the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Ready reports whether the server answers 200 on /readyz. It asks once:
// a 503 means not ready, not "try again".
func (c *Client) Ready(ctx context.Context) bool {
	err := c.retry(ctx, noRetry, http.MethodGet, "/readyz", "", nil, nil)
	return err == nil
}

// IsRetryable reports whether err may succeed if sent again: no leader
// (503), or the server could not be reached or dropped the connection
// (refused, reset, closed before answering). A cancelled context, a
// deadline or a timeout is not retryable, nor is any other answer.
func IsRetryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusServiceUnavailable
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	// A certificate refused, by either side, or a server that does not
	// speak TLS: the next attempt would meet the same. (A verification
	// callback's own refusal wraps the x509 error it met.)
	var (
		alert    tls.AlertError
		rh       tls.RecordHeaderError
		cv       *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
	)
	if errors.As(err, &alert) || errors.As(err, &rh) || errors.As(err, &cv) ||
		errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) {
		return false
	}
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "remote error" { // a TLS alert from the peer
		return false
	}
	// A connection that could not be made or broke: refused, reset,
	// unreachable, closed by the server before it answered.
	for _, target := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, syscall.EHOSTUNREACH, syscall.ENETUNREACH, io.EOF, io.ErrUnexpectedEOF} {
		if errors.Is(err, target) {
			return true
		}
	}
	// A name that does not resolve will not resolve a second later.
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return true
	}
	// net/http's own words for a connection that died under a request.
	for _, s := range []string{"server closed idle connection", "persistConn.readLoop exiting",
		"http2: client connection lost", "http2: server sent GOAWAY"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// JoinRetry asks the cluster to add m until it succeeds or ctx is done,
// waiting between attempts with exponential backoff and full jitter: each
// wait uniform in [0, ceiling), the ceiling doubling from 200ms to 5s. It
// is what a server started with --join runs.
func (c *Client) JoinRetry(ctx context.Context, m wire.Member, onError func(error)) error {
	wait := backoff.New(backoff.Config{Min: joinRetryMin, Max: joinRetryMax})
	for {
		// One attempt at a time: this loop backs off and reports each
		// failure itself.
		err := c.join(ctx, noRetry, m)
		if err == nil {
			return nil
		}
		var e *Error
		if errors.As(err, &e) && e.Status != http.StatusServiceUnavailable {
			return fmt.Errorf("joining %s: %w", c.base.Host, err)
		}
		if onError != nil {
			onError(err)
		}
		t := time.NewTimer(wait.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Outcomes reports a caller's outcomes per endpoint (POST /v1/outcomes).
func (c *Client) Outcomes(ctx context.Context, rep wire.OutcomeReport) (wire.OutcomeReply, error) {
	var out wire.OutcomeReply
	err := c.json(ctx, http.MethodPost, "/v1/outcomes", rep, &out)
	return out, err
}

// ForwardOutcomes sends the leader what this server's xDS subscribers
// reported over LRS (POST /v1/internal/outcomes); servers call it, not
// operators.
func (c *Client) ForwardOutcomes(ctx context.Context, b wire.OutcomeBatch) (wire.OutcomeReply, error) {
	var out wire.OutcomeReply
	err := c.json(ctx, http.MethodPost, "/v1/internal/outcomes", b, &out)
	return out, err
}

// ProbeResults sends a server's probe batch to the leader (POST
// /v1/internal/probe-results); servers call it, not operators.
func (c *Client) ProbeResults(ctx context.Context, rep wire.ProbeReport) (wire.ProbeReply, error) {
	var out wire.ProbeReply
	err := c.json(ctx, http.MethodPost, "/v1/internal/probe-results", rep, &out)
	return out, err
}

// Evacuate starts an evacuation, or with req.Undo ends one.
func (c *Client) Evacuate(ctx context.Context, req wire.EvacuateRequest) (wire.EvacuationView, error) {
	var out wire.EvacuationView
	err := c.json(ctx, http.MethodPost, "/v1/evacuations", req, &out)
	return out, err
}

// Evacuations lists the evacuations in force.
func (c *Client) Evacuations(ctx context.Context) ([]wire.EvacuationView, error) {
	var out []wire.EvacuationView
	err := c.json(ctx, http.MethodGet, "/v1/evacuations", nil, &out)
	return out, err
}

// Regions reports the server's region and the regions it follows.
func (c *Client) Regions(ctx context.Context) (wire.Regions, error) {
	var out wire.Regions
	err := c.json(ctx, http.MethodGet, "/v1/regions", nil, &out)
	return out, err
}

// Failover fails a region's callers over to another, or with req.Undo
// ends the failover.
func (c *Client) Failover(ctx context.Context, req wire.FailoverRequest) (wire.EvacuationView, error) {
	var out wire.EvacuationView
	err := c.json(ctx, http.MethodPost, "/v1/regions/failover", req, &out)
	return out, err
}
