// Package failover reads the out-of-band failover signal: a file, or an
// HTTP URL, that the operator controls outside cairn, naming the regions
// whose callers are to be failed over to another region. Each server
// polls it on its own and applies what it says to its own table, as a
// failover committed through the store would be applied (its region's
// instances last for every caller), without the store: it is the lever
// for when the control plane itself is impaired (no quorum, no leader
// to commit `cairn region failover`), as Route 53 ARC's routing controls
// are read by the data plane, not decided by it.
//
// The signal is YAML (or JSON):
//
//	failovers:
//	  - {from: r1, to: r2}                  # every service
//	  - {from: r1, to: r2, service: shop/web}
//
// A server applies the entries whose from is its own region. An entry
// that goes away ends its failover: the region's instances return over
// their services' shift_back, timed by this server's clock (the store's
// failovers step in the log, so that every server publishes the same
// share; the signal's cannot, and need not: it is for a bad day). A
// missing file, or a URL that answers 404, says no failover. A signal
// that cannot be read or does not parse changes nothing: the last one
// read stays in force (fail static), and the error is reported.
//
// Imports: the wire types (an entry is an evacuation with To), the label
// rule; nothing of the pipeline.
package failover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/cairn-sd/cairn/wire"
)

// Config configures a Signal.
type Config struct {
	// Source is the signal: a file's path, or an http:// or https://
	// URL. Required.
	Source string
	// Region is this server's region: the entries from it apply.
	Region string
	// Interval is how often the signal is read. Defaults to 500ms.
	Interval time.Duration
	// Client fetches a URL. Defaults to a client with a 2s timeout.
	Client *http.Client

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// maxSignal bounds what is read of the signal.
const maxSignal = 1 << 20

// MaxFailovers bounds the failovers a signal may list: each build weighs
// every instance against each one held, so a signal of thousands would
// slow every table (the store keeps as few evacuations in force).
const MaxFailovers = 64

// Signal is the out-of-band signal as this server last read it.
type Signal struct {
	cfg Config
	m   *metrics

	mu sync.Mutex
	// fos are the failovers the signal names or named (returning), by
	// scope; readAt when it was last read whole, err what was wrong
	// with the last read.
	fos     map[scope]*wire.Evacuation
	readAt  time.Time
	err     error
	ignored []string
	changed chan struct{}
}

// scope is a failover's: its region and service.
type scope struct{ region, namespace, service string }

// New checks cfg and returns a Signal that holds no failover until Run
// has read it.
func New(cfg Config) (*Signal, error) {
	if cfg.Source == "" {
		return nil, errors.New("failover: Source is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 2 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Signal{cfg: cfg, fos: map[scope]*wire.Evacuation{}, changed: make(chan struct{}, 1)}
	m, err := newMetrics(cfg.Registerer, s)
	if err != nil {
		return nil, err
	}
	s.m = m
	return s, nil
}

// Run reads the signal every Interval until ctx is done, once at once.
func (s *Signal) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.Read(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Read reads the signal once and applies it.
func (s *Signal) Read(ctx context.Context) {
	b, err := s.fetch(ctx)
	var reqs []wire.EvacuateRequest
	if err == nil {
		reqs, err = Parse(b)
	}
	if err != nil {
		s.m.errors.Inc()
		s.mu.Lock()
		first := s.err == nil || s.err.Error() != err.Error()
		s.err = err
		s.mu.Unlock()
		if first {
			s.cfg.Logger.Error("the failover signal cannot be read; the last one read stays in force", "source", s.cfg.Source, "err", err)
		}
		return
	}
	s.apply(reqs)
}

// fetch returns the signal's bytes; nil when it says nothing (no file,
// a URL that answers 404).
func (s *Signal) fetch(ctx context.Context) ([]byte, error) {
	src := s.cfg.Source
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		f, err := os.Open(src)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readAll(f)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Client.Timeout+time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s", src, resp.Status)
	}
	return readAll(resp.Body)
}

func readAll(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSignal+1))
	if err == nil && len(b) > maxSignal {
		err = fmt.Errorf("the signal is over %d bytes", maxSignal)
	}
	return b, err
}

// entry is one failover of the signal.
type entry struct {
	From    string `yaml:"from"`
	To      string `yaml:"to"`
	Service string `yaml:"service"`
	Reason  string `yaml:"reason"`
}

// Parse reads a signal: its failovers as the requests they are, each
// checked as `cairn region failover` checks its own; a wrong one is an
// error naming it ("failovers[1].to: ..."), and nothing of the signal
// applies. Empty says no failover.
func Parse(b []byte) ([]wire.EvacuateRequest, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	var doc struct {
		Failovers []entry `yaml:"failovers"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("failover signal: %w", err)
	}
	if len(doc.Failovers) > MaxFailovers {
		return nil, fmt.Errorf("failover signal: failovers: %d listed, at most %d", len(doc.Failovers), MaxFailovers)
	}
	seen := map[scope]int{}
	out := make([]wire.EvacuateRequest, 0, len(doc.Failovers))
	for i, e := range doc.Failovers {
		r := wire.FailoverRequest{From: e.From, To: e.To, Reason: e.Reason}
		if e.Service != "" {
			ns, svc, ok := strings.Cut(e.Service, "/")
			if !ok {
				return nil, fmt.Errorf("failover signal: failovers[%d].service: %q is not NS/SVC", i, e.Service)
			}
			r.Namespace, r.Service = ns, svc
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("failover signal: failovers[%d].%w", i, err)
		}
		k := scope{r.From, r.Namespace, r.Service}
		if j, dup := seen[k]; dup {
			return nil, fmt.Errorf("failover signal: failovers[%d] names the scope of failovers[%d] again", i, j)
		}
		seen[k] = i
		out = append(out, r.Evacuation())
	}
	return out, nil
}

// apply makes reqs the failovers in force: new ones start, gone ones
// end (their region returns), and those of other regions are ignored.
func (s *Signal) apply(reqs []wire.EvacuateRequest) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		s.cfg.Logger.Info("the failover signal reads again", "source", s.cfg.Source)
	}
	s.readAt, s.err = now, nil
	want := map[scope]wire.EvacuateRequest{}
	s.ignored = s.ignored[:0]
	for _, r := range reqs {
		if r.Region != s.cfg.Region {
			s.ignored = append(s.ignored, fmt.Sprintf("from %s (this server is in %s)", r.Region, s.cfg.Region))
			continue
		}
		want[scope{r.Region, r.Namespace, r.Service}] = r
	}
	changed := false
	for k, r := range want {
		e := s.fos[k]
		switch {
		case e == nil:
			e = &wire.Evacuation{Region: r.Region, Namespace: r.Namespace, Service: r.Service, To: r.To, Reason: r.Reason,
				Actor: "signal " + s.cfg.Source, StartedAt: now}
			s.fos[k] = e
		case !e.EndedAt.IsZero():
			e.EndedAt, e.EndedBy, e.StartedAt = time.Time{}, "", now // failed over again while it returned
		case e.To == r.To && e.Reason == r.Reason:
			continue
		}
		e.To, e.Reason = r.To, r.Reason
		changed = true
		s.cfg.Logger.Warn("failover signalled", "scope", e.Scope(), "source", s.cfg.Source, "reason", e.Reason)
	}
	for k, e := range s.fos {
		if _, ok := want[k]; ok {
			continue
		}
		if e.EndedAt.IsZero() {
			e.EndedAt, e.EndedBy = now, "signal "+s.cfg.Source
			changed = true
			s.cfg.Logger.Warn("failover no longer signalled: the region returns over its services' shift_back", "scope", e.Scope(), "source", s.cfg.Source)
		} else if now.Sub(e.EndedAt) > wire.MaxShiftBack {
			delete(s.fos, k) // returned, whatever its services' shift_back
		}
	}
	if changed {
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

// Failovers returns the failovers the signal holds as of now: in force,
// or ended and returning (Returned counted from their end).
func (s *Signal) Failovers(now time.Time) []wire.Evacuation {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fos) == 0 {
		return nil
	}
	out := make([]wire.Evacuation, 0, len(s.fos))
	for _, e := range s.fos {
		c := *e
		if !c.EndedAt.IsZero() {
			c.Returned, c.ReturnedAt = wire.Duration(max(now.Sub(c.EndedAt), 0)), now
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b wire.Evacuation) int { return strings.Compare(a.Scope(), b.Scope()) })
	return out
}

// Changed is signalled when a failover starts or ends.
func (s *Signal) Changed() <-chan struct{} { return s.changed }

// Status reports the signal as this server last read it.
func (s *Signal) Status() *wire.FailoverSignal {
	now := s.cfg.Now()
	st := &wire.FailoverSignal{Source: s.cfg.Source, Failovers: []wire.EvacuationView{}}
	for _, e := range s.Failovers(now) {
		st.Failovers = append(st.Failovers, wire.EvacuationView{Evacuation: e, State: e.State()})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.ReadAt = s.readAt
	if s.err != nil {
		st.Error = s.err.Error()
	}
	st.Ignored = slices.Clone(s.ignored)
	return st
}
