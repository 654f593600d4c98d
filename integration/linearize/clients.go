package linearize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// ClientsConfig describes the clients of a run: each sends one request
// at a time, to a node picked at random, about an instance picked at
// random, and records it.
type ClientsConfig struct {
	// URLs are the nodes' API base URLs (http://host:port).
	URLs []string
	// Token is the bearer token; empty: none.
	Token string
	// Namespace and Service name the service; it must be applied, with
	// a disruption budget that never refuses a drain (max_unavailable
	// 100%) and a drain window and lease TTL longer than the run, so
	// that only the clients move an instance's lifecycle.
	Namespace, Service string
	// Keys are the instance ids the clients work on. Each registration
	// of key i has the same content: address Address(i).
	Keys []string
	// Clients is how many clients run at once; defaults to 4.
	Clients int
	// Pause is each client's pause between two requests; defaults to
	// 20ms. It bounds the load: at most Clients/Pause requests a second.
	Pause time.Duration
	// Timeout bounds one request; defaults to 2s. A request without an
	// answer by then is of unknown outcome.
	Timeout time.Duration
	// LocalReads makes the reads ordinary ones, answered by the node
	// asked from its own replica (no ?consistent=true): not
	// linearizable, a control that the check can fail.
	LocalReads bool
	// Backoff is a client's pause after an answer of unknown outcome (a
	// 503, none); defaults to 200ms.
	Backoff time.Duration
	// Seed seeds the clients' choices.
	Seed uint64
}

// Address is the address of key i's registrations: in 10/8, never
// dialled.
func Address(i int) string { return fmt.Sprintf("10.77.%d.%d", i/250, i%250+1) }

// Clients run the operations of ClientsConfig until stopped.
type Clients struct {
	cfg    ClientsConfig
	rec    *Recorder
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex
	err error // the first answer the model has no place for
}

// StartClients starts cfg's clients, recording into rec. They run until
// ctx is done or Stop is called.
func StartClients(ctx context.Context, cfg ClientsConfig, rec *Recorder) *Clients {
	if cfg.Clients == 0 {
		cfg.Clients = 4
	}
	if cfg.Pause == 0 {
		cfg.Pause = 20 * time.Millisecond
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &Clients{cfg: cfg, rec: rec, cancel: cancel}
	for i := range cfg.Clients {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.run(ctx, i)
		}()
	}
	return c
}

// Stop stops the clients and waits for their requests in flight.
func (c *Clients) Stop() {
	c.cancel()
	c.wg.Wait()
}

// Err is the first answer outside the model (a 400, a 429, a 500...):
// the run is void then, and says why.
func (c *Clients) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Clients) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// client is one client's own knowledge: the incarnation it last saw of
// each key, and its registration ids.
type client struct {
	id    int
	rng   *rand.Rand
	hc    *http.Client
	inc   map[string]uint64
	regID map[string]string
	n     int
}

func (c *Clients) run(ctx context.Context, id int) {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	cl := &client{id: id, rng: rand.New(rand.NewPCG(c.cfg.Seed, uint64(id))),
		hc: &http.Client{Transport: tr, Timeout: c.cfg.Timeout}, inc: map[string]uint64{}, regID: map[string]string{}}
	pause := time.NewTicker(c.cfg.Pause)
	defer pause.Stop()
	for ctx.Err() == nil {
		c.one(ctx, cl)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
	}
}

// one makes one request: a registration (a fresh id, or now and then
// the client's last id again: a retry), a renewal, a drain or a
// deregistration with the incarnation the client last saw, or a
// consistent read.
func (c *Clients) one(ctx context.Context, cl *client) {
	ki := cl.rng.IntN(len(c.cfg.Keys))
	key := c.cfg.Keys[ki]
	node := c.cfg.URLs[cl.rng.IntN(len(c.cfg.URLs))]
	var in Input
	switch p := cl.rng.IntN(100); {
	case p < 20:
		rid := cl.regID[key]
		if rid == "" || cl.rng.IntN(4) != 0 {
			cl.n++
			rid = fmt.Sprintf("c%d-%d", cl.id, cl.n)
			cl.regID[key] = rid
		}
		in = Input{Kind: Register, Key: key, RegID: rid}
	case p < 60:
		in = Input{Kind: Read, Key: key}
	default:
		kind := Renew
		if p >= 80 {
			kind = Drain
		}
		if p >= 90 {
			kind = Deregister
		}
		inc := cl.inc[key]
		if inc == 0 {
			inc = 1 // not seen yet: a guess the store fences
		}
		in = Input{Kind: kind, Key: key, Inc: inc}
	}
	conn := Conn{HTTP: cl.hc, Token: c.cfg.Token, Namespace: c.cfg.Namespace, Service: c.cfg.Service, LocalReads: c.cfg.LocalReads}
	out, err := conn.Do(ctx, c.rec, cl.id, node, in, Address(ki))
	if err != nil {
		c.fail(fmt.Errorf("client %d: %w", cl.id, err))
		return
	}
	if out.Inc != 0 {
		cl.inc[key] = out.Inc
	}
	if out.Result == Unknown {
		// Back off as a real client does (the CLI retries a 503 after a
		// pause): besides, every operation of unknown outcome stays open
		// to the end of the history, and the check's cost grows with how
		// many are open at once.
		select {
		case <-ctx.Done():
		case <-time.After(c.cfg.Backoff):
		}
	}
}

// Conn sends the operations of one service's instances to a node's API.
type Conn struct {
	HTTP               *http.Client
	Token              string
	Namespace, Service string
	// Port is the name of the service's port a registration gives 8080;
	// defaults to "http".
	Port string
	// LocalReads: see ClientsConfig.
	LocalReads bool
}

// Do sends in to node (its base URL) and records it in rec as client: a
// registration registers in.Key at addr. A request that cannot have
// taken effect (a node that refused the connection, a failed read) is
// not recorded. err is an answer the model has no place for.
func (c Conn) Do(ctx context.Context, rec *Recorder, client int, node string, in Input, addr string) (Output, error) {
	if c.Port == "" {
		c.Port = "http"
	}
	base := fmt.Sprintf("%s/v1/services/%s/%s", node, url.PathEscape(c.Namespace), url.PathEscape(c.Service))
	method, path := http.MethodPost, fmt.Sprintf("%s/instances/%s/%s", base, url.PathEscape(in.Key), in.Kind)
	var body any = map[string]any{"incarnation": in.Inc}
	switch in.Kind {
	case Register:
		path = base + "/instances"
		body = map[string]any{"instance_id": in.Key, "addresses": []string{addr}, "ports": map[string]int{c.Port: 8080},
			"registration_id": in.RegID}
	case Read:
		method, path, body = http.MethodGet, base+"/endpoints?all=true&consistent=true", nil
		if c.LocalReads {
			path = base + "/endpoints?all=true"
		}
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return Output{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	call := rec.Begin(client, in)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		var op *net.OpError
		if in.Kind != Read && !(errors.As(err, &op) && op.Op == "dial") {
			call.End(Output{}, fmt.Sprintf("%s: %v", node, err)) // sent, no answer
		}
		return Output{}, nil
	}
	raw, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	note := fmt.Sprintf("%s %d", node, resp.StatusCode)
	if rerr != nil {
		if in.Kind != Read {
			call.End(Output{}, fmt.Sprintf("%s: %v", note, rerr))
		}
		return Output{}, nil
	}
	out, ok, err := answer(in, resp.StatusCode, raw)
	if err != nil {
		return Output{}, fmt.Errorf("%s via %s: %w", Describe(in, Output{}), node, err)
	}
	if !ok {
		return Output{}, nil
	}
	if out.Result == Unknown {
		note += " " + string(bytes.TrimSpace(raw))
	}
	call.End(out, note)
	return out, nil
}

// ReadAll reads every instance of the service with one consistent read
// of node, and records it as a read of each of keys (all sent and
// answered at the same moments). ok is false when the read failed (it is
// then not recorded).
func (c Conn) ReadAll(ctx context.Context, rec *Recorder, client int, node string, keys []string) (map[string]Output, bool, error) {
	path := fmt.Sprintf("%s/v1/services/%s/%s/endpoints?all=true&consistent=true", node, url.PathEscape(c.Namespace), url.PathEscape(c.Service))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, false, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	calls := make([]*Call, len(keys))
	for i, k := range keys {
		calls[i] = rec.Begin(client, Input{Kind: Read, Key: k})
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, false, nil
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, false, nil
	}
	var eps []instanceJSON
	if err := json.Unmarshal(raw, &eps); err != nil {
		return nil, false, fmt.Errorf("endpoints via %s: %v", node, err)
	}
	got := firstOf(eps)
	out := map[string]Output{}
	for i, k := range keys {
		o := Output{Result: OK}
		if ep, ok := got[k]; ok {
			o.Inc, o.Lifecycle = ep.Incarnation, ep.Lifecycle
		}
		out[k] = o
		calls[i].End(o, node+" 200")
	}
	return out, true, nil
}

// firstOf maps each instance id to its first endpoint in eps: the
// endpoints view lists the store's records first, then what only the
// node's status table still holds (an incarnation the store has moved
// past, a moment before the next table), which a read of the store must
// not take for its state.
func firstOf(eps []instanceJSON) map[string]instanceJSON {
	m := make(map[string]instanceJSON, len(eps))
	for _, ep := range eps {
		if _, ok := m[ep.ID]; !ok {
			m[ep.ID] = ep
		}
	}
	return m
}

type instanceJSON struct {
	ID          string `json:"instance_id"`
	Incarnation uint64 `json:"incarnation"`
	Lifecycle   string `json:"lifecycle"`
}

// answer turns a response into the model's output. ok is false for a
// read that failed (it had no effect and is not recorded); err is an
// answer the model has no place for.
func answer(in Input, code int, body []byte) (out Output, ok bool, err error) {
	var e struct {
		Code string `json:"code"`
	}
	switch {
	case code == http.StatusServiceUnavailable:
		// no_leader: "the write may or may not have committed".
		return Output{}, in.Kind != Read, nil
	case in.Kind == Read && code == http.StatusNotFound:
		// The service unknown to the replica read: it holds no
		// instance either (the service is applied before any client
		// starts, so the model finds such a read stale).
		return Output{Result: OK}, true, nil
	case in.Kind == Read && code == http.StatusOK:
		var eps []instanceJSON
		if err := json.Unmarshal(body, &eps); err != nil {
			return out, false, fmt.Errorf("endpoints: %v", err)
		}
		out.Result = OK
		if ep, ok := firstOf(eps)[in.Key]; ok {
			out.Inc, out.Lifecycle = ep.Incarnation, ep.Lifecycle
		}
		return out, true, nil
	case in.Kind != Read && (code == http.StatusOK || code == http.StatusCreated):
		var r instanceJSON
		if err := json.Unmarshal(body, &r); err != nil {
			return out, false, fmt.Errorf("answer %d: %v", code, err)
		}
		out = Output{Result: OK, Inc: r.Incarnation, Lifecycle: r.Lifecycle}
		if code == http.StatusCreated {
			out.Result = Created
		}
		return out, true, nil
	case in.Kind != Read && code == http.StatusConflict && json.Unmarshal(body, &e) == nil && e.Code == "fenced":
		return Output{Result: Fenced}, true, nil
	case in.Kind != Read && in.Kind != Register && code == http.StatusNotFound:
		return Output{Result: NotFound}, true, nil
	}
	return out, false, fmt.Errorf("answered %d: %s", code, bytes.TrimSpace(body))
}
