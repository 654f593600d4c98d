package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/cairn-sd/cairn/agent"
	"github.com/cairn-sd/cairn/internal/backoff"
	"github.com/cairn-sd/cairn/internal/dnsname"
	"github.com/cairn-sd/cairn/status"
)

// Region is another region to follow: its name, as its servers' --region
// says, and its servers' gRPC (xDS) addresses, tried in turn.
type Region struct {
	Name    string
	Servers []string
}

// Config configures Peers.
type Config struct {
	// Regions are the regions to follow; each name once, none of them
	// Own. Empty: Peers follows nothing, and every snapshot is empty.
	Regions []Region
	// Own is this node's region: its peers see it as a caller there.
	Own string
	// NodeID names this node to the other regions' servers.
	NodeID string
	// Token, if set, is sent to the other regions' servers ("authorization:
	// Bearer TOKEN"): a reader token of theirs.
	Token string
	// Dir, if set, is where each region's views are kept
	// ("peer-NAME.cairn"), read back at start.
	Dir string
	// StaleAfter is how old a region's view may be before its instances
	// are marked status.PeerStale: the DNS server's --stale-after.
	// Defaults to 5s.
	StaleAfter time.Duration
	// Capacity is the most instances kept of one region. Defaults to
	// 100,000.
	Capacity int
	// DialOptions are added to each agent's gRPC dial options: the
	// transport's credentials (TLS), among others.
	DialOptions []grpc.DialOption
	// Backoff times each agent's reconnections (package agent's default
	// when zero).
	Backoff backoff.Config
	// Settle is how long a change of a region's view waits for the next
	// before a snapshot is made of them, so that a burst of responses
	// makes one. Defaults to 50ms.
	Settle time.Duration

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// FileName is the name of the file a region's views are kept in, in
// Config.Dir.
func FileName(region string) string { return "peer-" + region + ".cairn" }

// Peers follows other regions' views (see the package comment).
type Peers struct {
	cfg     Config
	regions []*region
	m       *metrics

	mu   sync.Mutex
	snap *Snapshot
	// changed is signalled when a new snapshot is made.
	changed chan struct{}
}

// region is one region followed.
type region struct {
	name  string
	agent *agent.Agent
	table *status.Publisher
	// Owned by Run's loop: the table version the snapshot was made
	// from, and whether its view was stale then.
	version uint64
	stale   bool
}

// New validates cfg and starts following nothing yet: Run streams, and
// Follow names the services. Views kept on disk are read back at once,
// and the first snapshot holds them.
func New(cfg Config) (*Peers, error) {
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 5 * time.Second
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 100_000
	}
	if cfg.Backoff.Max <= 0 {
		// Another region's servers are few and far: one back is tried
		// again within seconds, not the agent's half a minute.
		cfg.Backoff.Min, cfg.Backoff.Max = 500*time.Millisecond, 5*time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 50 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Peers{cfg: cfg, changed: make(chan struct{}, 1)}
	seen := map[string]bool{}
	for _, r := range cfg.Regions {
		switch {
		case dnsname.CheckLabel(r.Name) != nil:
			return nil, fmt.Errorf("peer: region %q: a region's name is a DNS label (lower-case letters, digits and '-', 1-63)", r.Name)
		case r.Name == cfg.Own:
			return nil, fmt.Errorf("peer: region %q is this server's own region (--region): a region follows only others", r.Name)
		case seen[r.Name]:
			return nil, fmt.Errorf("peer: region %q is named twice", r.Name)
		case len(r.Servers) == 0:
			return nil, fmt.Errorf("peer: region %q: at least one server address is required", r.Name)
		}
		seen[r.Name] = true
		reg := cfg.Registerer
		if reg != nil {
			reg = prometheus.WrapRegistererWith(prometheus.Labels{"peer_region": r.Name}, reg)
		}
		table, err := status.New(status.Config{Capacity: cfg.Capacity, Initial: min(256, cfg.Capacity)})
		if err != nil {
			return nil, err
		}
		path := ""
		if cfg.Dir != "" {
			path = filepath.Join(cfg.Dir, FileName(r.Name))
		}
		ag, err := agent.New(agent.Config{Servers: r.Servers, NodeID: cfg.NodeID, Region: cfg.Own, Token: cfg.Token,
			Path: path, Table: table, StaleAfter: cfg.StaleAfter, Backoff: cfg.Backoff, DialOptions: cfg.DialOptions, NoViewMetrics: true,
			// A link cut without a FIN is found by pings as soon as
			// grpc-go allows (every 10s), given up 5s later.
			Keepalive: keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second},
			Now:       cfg.Now, Logger: cfg.Logger.With("peer_region", r.Name), Registerer: reg})
		if err != nil {
			return nil, fmt.Errorf("peer: region %q: %w", r.Name, err)
		}
		if err := ag.LoadError(); err != nil {
			cfg.Logger.Warn("the views kept of another region could not all be read", "peer_region", r.Name, "err", err)
		}
		p.regions = append(p.regions, &region{name: r.Name, agent: ag, table: table})
	}
	m, err := newMetrics(cfg.Registerer, p)
	if err != nil {
		return nil, err
	}
	p.m = m
	p.snap = &Snapshot{}
	p.refresh(false)
	return p, nil
}

// Follow names the services this node's table holds ("<ns>/<svc>"):
// each region's views of them are followed, and no other. The
// publisher calls it when its catalog changes.
func (p *Peers) Follow(services []string) {
	for _, r := range p.regions {
		r.agent.Follow(services)
	}
}

// Current returns the latest snapshot of the regions' instances.
func (p *Peers) Current() *Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snap
}

// Changed is signalled when a new snapshot is made; Current returns it.
func (p *Peers) Changed() <-chan struct{} { return p.changed }

// Run streams each region's views until ctx is done, and makes a new
// snapshot whenever one changes or its staleness does.
func (p *Peers) Run(ctx context.Context) error {
	if len(p.regions) == 0 {
		<-ctx.Done()
		return nil
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(p.regions))
	for _, r := range p.regions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.agent.Run(ctx)
		}()
	}
	// A view's staleness moves with time, not with a response: checked
	// a few times per stale-after.
	tick := time.NewTicker(min(p.cfg.StaleAfter/4, time.Second))
	defer tick.Stop()
	for {
		// One channel per region's next table; a goroutine each would
		// be the same wait, and a reflect.Select no cheaper to read.
		woke := make(chan struct{}, 1)
		stop := make(chan struct{})
		for _, r := range p.regions {
			ch := r.table.Changed(r.version)
			go func() {
				select {
				case <-ch:
					select {
					case woke <- struct{}{}:
					default:
					}
				case <-stop:
				}
			}()
		}
		settle := false
		select {
		case <-ctx.Done():
			close(stop)
			return nil
		case err := <-errs:
			close(stop)
			if ctx.Err() != nil {
				return nil // the agents stop with ctx: the select saw one first
			}
			return errors.Join(err, errors.New("peer: an agent stopped"))
		case <-woke:
			settle = true
		case <-tick.C:
		}
		close(stop)
		if settle {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(p.cfg.Settle):
			}
		}
		p.refresh(true)
	}
}

// refresh makes a new snapshot if a region's table or staleness moved
// since the last, and signals it when its instances differ.
func (p *Peers) refresh(signal bool) {
	now := p.cfg.Now()
	moved := false
	for _, r := range p.regions {
		stale := now.Sub(r.agent.LastSync()) > p.cfg.StaleAfter || r.agent.Restored()
		if t := r.table.Acquire(); t != nil {
			if t.Version() != r.version {
				moved = true
				r.version = t.Version()
			}
			t.Release()
		}
		if stale != r.stale {
			moved = true
			r.stale = stale
		}
	}
	p.mu.Lock()
	prev := p.snap
	p.mu.Unlock()
	if !moved && prev.gen > 0 {
		return
	}
	next := &Snapshot{gen: prev.gen + 1, services: map[string][]status.Instance{}}
	for _, r := range p.regions {
		r.collect(next)
	}
	for k, ins := range next.services {
		slices.SortFunc(ins, func(a, b status.Instance) int { return strings.Compare(a.ID, b.ID) })
		next.services[k] = ins
	}
	if prev.gen > 0 && next.same(prev) {
		return
	}
	p.mu.Lock()
	p.snap = next
	p.mu.Unlock()
	p.m.snapshots.Inc()
	if signal {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// collect adds the region's instances to s: those its table says are in
// the region (or in none, which is the region's own), not terminated,
// marked PeerStale while its view is stale.
func (r *region) collect(s *Snapshot) {
	t := r.table.Acquire()
	if t == nil {
		return
	}
	defer t.Release()
	d := t.Directory()
	if d == nil {
		return
	}
	for id := range uint32(t.Services().Len()) {
		svc, ok := d.Service(id)
		if !ok || svc.Name == "" {
			continue
		}
		key := svc.Namespace + "/" + svc.Name
		for _, slot := range t.Members(id) {
			e := t.Entry(int(slot))
			info := d.Instance(int(slot))
			if info == nil || e.Lifecycle == status.Terminated || e.Incarnation != info.Incarnation {
				continue
			}
			reg := t.Locality(e.Region)
			if reg != r.name && reg != "" {
				continue // a region speaks for itself alone
			}
			in := status.Instance{ID: info.ID, Incarnation: info.Incarnation, Region: r.name, Zone: t.Locality(e.Zone),
				Info: info, Verdict: e.Verdict, Lifecycle: e.Lifecycle, Flags: e.Flags &^ status.PeerStale,
				Weight: e.Weight, BaseWeight: e.BaseWeight, Shift: e.Shift}
			if r.stale {
				in.Flags |= status.PeerStale
			}
			s.services[key] = append(s.services[key], in)
		}
	}
}

// Snapshot is the other regions' instances at one moment, by service.
// It is immutable.
type Snapshot struct {
	gen      uint64
	services map[string][]status.Instance // by "<ns>/<svc>", sorted by id
}

// Generation numbers the snapshots: another generation holds other
// instances (or other states of them); 0 is the empty one before any.
func (s *Snapshot) Generation() uint64 { return s.gen }

// Of returns the other regions' instances of ns/svc, sorted by id (one
// region's instance before another's of the same id). Read-only.
func (s *Snapshot) Of(namespace, service string) []status.Instance {
	if s == nil || len(s.services) == 0 {
		return nil
	}
	return s.services[namespace+"/"+service]
}

// same reports whether s holds what o does.
func (s *Snapshot) same(o *Snapshot) bool {
	if len(s.services) != len(o.services) {
		return false
	}
	for k, a := range s.services {
		b, ok := o.services[k]
		if !ok || !slices.EqualFunc(a, b, sameInstance) {
			return false
		}
	}
	return true
}

func sameInstance(a, b status.Instance) bool {
	return a.ID == b.ID && a.Incarnation == b.Incarnation && a.Region == b.Region && a.Zone == b.Zone &&
		a.Info == b.Info && a.Verdict == b.Verdict && a.Lifecycle == b.Lifecycle && a.Flags == b.Flags &&
		a.Weight == b.Weight && a.BaseWeight == b.BaseWeight && a.Shift == b.Shift
}

// Instances is publish.Peers': the latest snapshot's generation and its
// instances by service.
func (p *Peers) Instances() (gen uint64, of func(namespace, service string) []status.Instance) {
	s := p.Current()
	return s.gen, s.Of
}
