package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-sd/cairn/internal/agentview"
	"github.com/cairn-sd/cairn/internal/backoff"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/tablefile"
)

// EndpointType is the type URL of the views: ClusterLoadAssignments.
const EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

// Config configures an Agent.
type Config struct {
	// Servers are the xDS servers' gRPC addresses (HOST:PORT), tried in
	// turn: the agent streams from one at a time and moves to the next
	// when it fails. At least one is required.
	Servers []string
	// Services are views subscribed from the start ("<ns>/<svc>"); the
	// agent adds any a caller asks for (Want).
	Services []string
	// NodeID, Region and Zone describe the agent's node to the servers
	// (node.id, node.locality). Region and Zone are also the place its
	// DNS answers rank tiers from (dnsserver.Config.Own).
	NodeID, Region, Zone string
	// Token, if set, is sent as "authorization: Bearer TOKEN".
	Token string
	// Path is the file the views are kept in (tablefile's format, with
	// each view's revision, version and times). Empty: nothing is kept.
	Path string
	// Table is the status table the agent fills from its views, for a
	// dnsserver to read. Required.
	Table *status.Publisher
	// Backoff times reconnections (full jitter; package backoff).
	// Defaults to waits below 1s at first, doubling up to 30s: when a
	// server goes, its agents come back spread over a second rather
	// than at once (field notes A7), and a long outage is asked about
	// twice a minute.
	Backoff backoff.Config
	// StaleAfter is the DNS server's threshold, which the status and
	// metrics report staleness by. Defaults to 5s.
	StaleAfter time.Duration
	// AbsentTTL is how long a server's word that a service does not
	// exist is taken (NXDOMAIN meanwhile) for a name asked about over
	// DNS whose view the agent never held, once that name has been
	// unsubscribed (past MaxViews/2 such names, the oldest are): its
	// next query after AbsentTTL subscribes again. Names still
	// subscribed (those of Services, of views that went, and the newest
	// unknown ones) come as soon as their service does. Defaults to 30s.
	AbsentTTL time.Duration
	// MaxViews caps the views subscribed to: names asked about past it
	// are answered Not Ready without a subscription (field notes A4: a
	// flood of names that do not exist must not grow the agent).
	// Defaults to 4096.
	MaxViews int
	// AnswerTimeout bounds the wait for a server's first answer on a new
	// stream: past it the agent moves to the next server. Defaults to
	// 10s.
	AnswerTimeout time.Duration
	// SaveInterval is the least time between two writes of the file.
	// Defaults to 250ms.
	SaveInterval time.Duration
	// TouchInterval is how often, while a stream is open and no view
	// changes, the file is written again to record that its views are
	// still current: an agent restarted while no server answers takes
	// the age of its views from the file, and that age counts against
	// the DNS server's max-stale. Defaults to 1m.
	TouchInterval time.Duration
	// DialOptions are added to the gRPC dial options (tests).
	DialOptions []grpc.DialOption

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Agent subscribes to views, serves them through its status table, and
// keeps them on disk.
type Agent struct {
	cfg Config
	m   *metrics

	mu    sync.Mutex
	views map[string]*view // by resource name
	// absent holds the names a server said do not exist, and when.
	absent map[string]time.Time
	// arrive holds, per name queried but not held, a channel closed when
	// its view comes or a server says it does not exist (Unheld).
	arrive map[string]chan struct{}
	// unknown holds the names subscribed to, never held, that a server
	// said do not exist, and when: the ones a flood of junk names fills.
	unknown map[string]time.Time
	// want is every name subscribed to; fresh those a session has not
	// subscribed to yet, dropped those it must unsubscribe from; pinned
	// the names of Config.Services, which stay subscribed.
	want, fresh, dropped, pinned map[string]bool
	// serial is the table's store revision, the zone's SOA serial: the
	// highest revision of any view held since the start, so that it
	// never goes back when a view goes.
	serial uint64
	bd     *builder
	// connected is whether a stream is open and has answered; lastGood
	// when the agent last knew its views current (now while connected).
	connected bool
	lastGood  time.Time
	// staleFrom, when set, is when the open stream's server last knew
	// its view current: a stale server said so (agentview.StaleAgeKey),
	// serving the agent stale because it offered nothing, or ending the
	// stream. The views are as old as that, connected or not. heard says
	// lastGood came from such a word: a view received since is no newer.
	staleFrom time.Time
	heard     bool
	// restored: the views came from disk and no server has answered
	// since.
	restored bool
	// server is the address of the stream open now, or the last one.
	server string
	// fileGood: the file read back whole at start, so the first save
	// may make it the previous copy; wrote: this agent has written it.
	fileGood, wrote bool
	loadErr         error

	wake  chan struct{} // a session has names to subscribe
	dirty chan struct{} // the writer has a table to save
}

// New validates cfg and loads the views kept at cfg.Path, publishing
// them at once: the agent answers from disk before any server does. A
// file that cannot be read is reported (LoadError) and set aside; the
// previous copy is read instead, if it is whole.
func New(cfg Config) (*Agent, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("agent: at least one server is required")
	}
	if cfg.Table == nil {
		return nil, errors.New("agent: Table is required")
	}
	if cfg.Backoff.Min <= 0 {
		cfg.Backoff.Min = time.Second
	}
	if cfg.Backoff.Max <= 0 {
		cfg.Backoff.Max = 30 * time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 5 * time.Second
	}
	if cfg.AbsentTTL <= 0 {
		cfg.AbsentTTL = 30 * time.Second
	}
	if cfg.MaxViews <= 0 {
		cfg.MaxViews = 4096
	}
	if cfg.AnswerTimeout <= 0 {
		cfg.AnswerTimeout = 10 * time.Second
	}
	if cfg.SaveInterval <= 0 {
		cfg.SaveInterval = 250 * time.Millisecond
	}
	if cfg.TouchInterval <= 0 {
		cfg.TouchInterval = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Agent{cfg: cfg, views: map[string]*view{}, absent: map[string]time.Time{}, arrive: map[string]chan struct{}{}, unknown: map[string]time.Time{}, want: map[string]bool{},
		fresh: map[string]bool{}, dropped: map[string]bool{}, pinned: map[string]bool{}, bd: newBuilder(cfg.Table.Capacity()),
		wake: make(chan struct{}, 1), dirty: make(chan struct{}, 1)}
	for _, s := range cfg.Services {
		ns, svc, ok := splitService(s)
		if !ok {
			return nil, fmt.Errorf("agent: service %q is not NAMESPACE/SERVICE (two DNS labels)", s)
		}
		a.want[agentview.Name(ns, svc)], a.pinned[agentview.Name(ns, svc)] = true, true
	}
	m, err := newMetrics(cfg.Registerer, a)
	if err != nil {
		return nil, err
	}
	a.m = m
	if cfg.Path != "" {
		a.load()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.publishLocked(); err != nil {
		return nil, err
	}
	return a, nil
}

// load reads the views kept on disk.
func (a *Agent) load() {
	s, err := tablefile.LoadKept(a.cfg.Path)
	a.fileGood = err == nil && s != nil
	if err != nil {
		a.loadErr = err
		a.cfg.Logger.Warn("the agent's views on disk could not all be read; resubscribing", "err", err)
		a.m.loadErrors.Inc()
	}
	if s == nil {
		return
	}
	views, err := viewsOf(s)
	if err != nil {
		a.loadErr = errors.Join(a.loadErr, err)
		a.cfg.Logger.Warn("the agent's views on disk do not hold together; resubscribing", "err", err)
		a.m.loadErrors.Inc()
		return
	}
	for _, v := range views {
		a.views[v.name] = v
		a.want[v.name] = true
	}
	a.restored = len(views) > 0
	a.lastGood = s.Synced
}

// LoadError returns what was wrong with the file at start, or nil.
func (a *Agent) LoadError() error { return a.loadErr }

// Unheld is dnsserver.Config.Unheld: a service the agent's table does
// not hold is subscribed to, and a channel returned that is closed when
// its view comes or a server says it does not exist — unless one has
// said so already (nil: NXDOMAIN). Past MaxViews names subscribed to, a
// new name gets a closed channel and no subscription: Not Ready.
func (a *Agent) Unheld(ns, svc string) <-chan struct{} {
	name := agentview.Name(ns, svc)
	a.mu.Lock()
	defer a.mu.Unlock()
	if at, gone := a.absent[name]; gone {
		if a.want[name] || a.cfg.Now().Sub(at) < a.cfg.AbsentTTL {
			return nil
		}
		delete(a.absent, name) // ask again
	}
	if _, held := a.views[name]; held {
		return closed // came since the query looked
	}
	if !a.want[name] {
		if len(a.want) >= a.cfg.MaxViews {
			return closed
		}
		a.want[name], a.fresh[name] = true, true
		delete(a.dropped, name)
		a.wakeLocked()
	}
	ch := a.arrive[name]
	if ch == nil {
		ch = make(chan struct{})
		a.arrive[name] = ch
	}
	return ch
}

// wakeLocked tells the open stream it has names to subscribe to or
// unsubscribe from.
func (a *Agent) wakeLocked() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// closed is a closed channel: Unheld's "nothing to wait for".
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// arrivedLocked closes the channel queries waiting for name wait on.
func (a *Agent) arrivedLocked(name string) {
	if ch := a.arrive[name]; ch != nil {
		close(ch)
		delete(a.arrive, name)
	}
}

// Restored reports whether the agent answers from disk, no server having
// answered since it started (dnsserver.Config.Restored).
func (a *Agent) Restored() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.restored
}

// Run streams views from the servers, in turn, until ctx is done,
// reconnecting with backoff and full jitter, and keeps the file.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.keep(ctx)
	}()
	defer wg.Wait()
	bo := backoff.New(a.cfg.Backoff)
	failing := false // the last attempts got no answer
	for i := 0; ctx.Err() == nil; i++ {
		addr := a.cfg.Servers[i%len(a.cfg.Servers)]
		answered, err := a.session(ctx, addr)
		a.disconnected()
		if ctx.Err() != nil {
			break
		}
		if answered {
			bo.Reset()
		}
		a.m.reconnects.Inc()
		wait := bo.Next()
		// One warning per outage, not one per attempt: a long one would
		// otherwise log twice a minute for as long as it lasts.
		switch {
		case answered:
			a.cfg.Logger.Warn("xDS stream ended; reconnecting", "server", addr, "err", err, "after", wait)
			failing = false
		case !failing:
			a.cfg.Logger.Warn("no xDS server answers; serving the views held, retrying with backoff", "server", addr, "err", err, "after", wait)
			failing = true
		default:
			a.cfg.Logger.Debug("xDS server unreachable; retrying", "server", addr, "err", err, "after", wait)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// session runs one stream: it subscribes to every name wanted (with the
// versions held, so that a server need not resend what has not changed),
// applies each response and acknowledges it, and subscribes to names
// wanted later. It reports whether the server answered at all.
func (a *Agent) session(ctx context.Context, addr string) (answered bool, err error) {
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// A stream that went silent (a server gone without a FIN, a
		// partition) is found by pings within 40 s (field notes A3, A6).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}, a.cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return false, err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A server must answer the first request of a type, even with
	// nothing (the protocol's rule): one that has not within
	// AnswerTimeout — its stream never opened, or its hub is stuck — is
	// left for the next (field notes A6).
	silent := time.AfterFunc(a.cfg.AnswerTimeout, func() {
		cancel(fmt.Errorf("agent: no answer from %s within %s", addr, a.cfg.AnswerTimeout))
	})
	defer silent.Stop()
	if a.cfg.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+a.cfg.Token)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		return false, cmp.Or(context.Cause(ctx), err)
	}
	node := &corev3.Node{Id: a.cfg.NodeID, Locality: &corev3.Locality{Region: a.cfg.Region, Zone: a.cfg.Zone}}
	names, held := a.subscription()
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: EndpointType,
		ResourceNamesSubscribe: names, InitialResourceVersions: held}); err != nil {
		return false, err
	}
	a.mu.Lock()
	a.server = addr
	a.mu.Unlock()
	type recv struct {
		resp *discoveryv3.DeltaDiscoveryResponse
		err  error
	}
	in := make(chan recv)
	go func() {
		for {
			r, err := stream.Recv()
			select {
			case in <- recv{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return answered, context.Cause(ctx)
		case r := <-in:
			if r.err != nil {
				// A stale server that lets the agent go says how old its
				// view is: the agent's views are that old, until it finds
				// a fresh server.
				if age, ok := agentview.ParseStaleAge(stream.Trailer().Get(agentview.StaleAgeKey)); ok {
					a.serverStale(age)
				}
				return answered, cmp.Or(context.Cause(ctx), r.err)
			}
			if !answered {
				// A stale server serves an agent that offered no view; it
				// says so in the header.
				if hdr, err := stream.Header(); err == nil {
					if age, ok := agentview.ParseStaleAge(hdr.Get(agentview.StaleAgeKey)); ok {
						a.serverStale(age)
						a.cfg.Logger.Warn("the xDS server serves a stale view; marked stale", "server", addr, "age", age)
					}
				}
			}
			answered = true
			silent.Stop()
			req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: r.resp.Nonce}
			if err := a.apply(r.resp); err != nil {
				a.m.nacks.Inc()
				a.cfg.Logger.Warn("refused a view", "server", addr, "err", err)
				req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			}
			if err := stream.Send(req); err != nil {
				return answered, err
			}
		case <-a.wake:
			if sub, unsub := a.takeChanges(); len(sub)+len(unsub) > 0 {
				if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType,
					ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}); err != nil {
					return answered, err
				}
			}
		case <-tick.C:
			a.reserve()
		}
	}
}

// subscription returns every name wanted, and the versions of the views
// held that a server may take as current. Views restored from disk are
// not offered: what the agent served of them (with withdrawals it
// deferred) is not the server's resource, and the server sends each
// again.
func (a *Agent) subscription() (names []string, held map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.fresh)
	clear(a.dropped)
	held = map[string]string{}
	for name, v := range a.views {
		if v.version != "" {
			held[name] = v.version
		}
	}
	return slices.Sorted(maps.Keys(a.want)), held
}

// takeChanges returns the names wanted that the open stream has not
// subscribed to, and those it must unsubscribe from.
func (a *Agent) takeChanges() (sub, unsub []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sub, unsub = slices.Sorted(maps.Keys(a.fresh)), slices.Sorted(maps.Keys(a.dropped))
	clear(a.fresh)
	clear(a.dropped)
	return sub, unsub
}

// apply applies one response, all of it or none of it: a response with
// one view that cannot be read, or that is older than the view held, or
// that removes a view held from a table older than it, is refused whole,
// and the agent keeps what it holds.
func (a *Agent) apply(resp *discoveryv3.DeltaDiscoveryResponse) error {
	if resp.TypeUrl != "" && resp.TypeUrl != EndpointType {
		return fmt.Errorf("agent: response of type %s, not %s", resp.TypeUrl, EndpointType)
	}
	// The store revision of the table the response is built from: what a
	// removal, which carries no version, is judged by. A server that
	// does not name one is taken at its word, under the shrink cap.
	tableRev, revErr := strconv.ParseUint(resp.SystemVersionInfo, 10, 64)
	type got struct {
		name, version string
		v             *agentview.View
	}
	var gots []got
	for _, r := range resp.Resources {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := r.GetResource().UnmarshalTo(cla); err != nil {
			return fmt.Errorf("agent: view %q: %w", r.Name, err)
		}
		v, err := agentview.Decode(cla)
		if err != nil {
			return fmt.Errorf("view %q: %w", r.Name, err)
		}
		if name := agentview.Name(v.Service.Namespace, v.Service.Name); name != r.Name {
			return fmt.Errorf("agent: resource %q carries the view of %q", r.Name, name)
		}
		gots = append(gots, got{r.Name, r.Version, v})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range gots {
		if held := a.views[g.name]; held != nil {
			if err := held.accept(g.v); err != nil {
				return err
			}
		}
	}
	if revErr == nil {
		for _, name := range resp.RemovedResources {
			if held := a.views[name]; held != nil {
				if err := held.acceptRemoval(tableRev); err != nil {
					return err
				}
			}
		}
	}
	now := a.cfg.Now()
	for _, g := range gots {
		held := a.views[g.name]
		if held == nil {
			held = &view{name: g.name}
			a.views[g.name] = held
		}
		held.got, held.version, held.received, held.removed = g.v, g.version, now, false
		delete(a.unknown, g.name)
		held.serve(now)
		delete(a.absent, g.name)
	}
	for _, name := range resp.RemovedResources {
		if v := a.views[name]; v != nil && eligible(v.served) > 0 {
			// A view in rotation that the server removes shrinks as any
			// other, under the cap, to nothing: a server that says a
			// service with instances in rotation does not exist (a
			// cluster rebuilt from nothing, a table not caught up) is
			// the large drop the cap is for. It goes once it serves
			// nothing (reserve); until then it answers as held.
			v.got = &agentview.View{Revision: v.got.Revision, Service: v.got.Service}
			v.removed = true
			v.serve(now)
			if len(v.served) > 0 {
				continue
			}
		}
		if a.views[name] != nil || a.want[name] {
			_, held := a.views[name]
			delete(a.views, name)
			a.absent[name] = now
			if !a.pinned[name] && !held {
				a.unknown[name] = now
			}
		}
	}
	// Names never held that a server said do not exist stay subscribed,
	// so that one that comes a moment later (a server restarted from an
	// older table, still catching up) comes at once; past half of
	// MaxViews of them the oldest are unsubscribed, so that the names a
	// flood of queries asks about never fill want (field notes A4). An
	// unsubscribed name is asked about again after AbsentTTL.
	for len(a.unknown) > a.cfg.MaxViews/2 {
		oldest, at := "", time.Time{}
		for name, t := range a.unknown {
			if oldest == "" || t.Before(at) || t.Equal(at) && name < oldest {
				oldest, at = name, t
			}
		}
		delete(a.unknown, oldest)
		delete(a.want, oldest)
		delete(a.fresh, oldest)
		a.dropped[oldest] = true
		a.wakeLocked()
	}
	if len(a.absent) > a.cfg.MaxViews {
		for name, at := range a.absent {
			if !a.want[name] && now.Sub(at) >= a.cfg.AbsentTTL {
				delete(a.absent, name)
			}
		}
	}
	// A server whose table is older than a view held sends nothing
	// older (it holds those views back until it catches up, and then
	// says so with a response from a newer table): until then it does
	// not keep the views current, and the agent is not connected.
	if revErr != nil || tableRev >= a.serial {
		a.restored = false
		if !a.connected {
			a.connected, a.heard = true, false
			a.m.connected.Set(1)
		}
	}
	a.m.applied.Inc()
	err := a.publishLocked()
	// After the table: a query that waited finds the view in it.
	for _, g := range gots {
		a.arrivedLocked(g.name)
	}
	for _, name := range resp.RemovedResources {
		a.arrivedLocked(name)
	}
	return err
}

// reserve moves the shrink cap's windows on: withdrawals a window
// deferred are let go as later windows allow.
func (a *Agent) reserve() {
	a.mu.Lock()
	defer a.mu.Unlock()
	now, changed := a.cfg.Now(), false
	for name, v := range a.views {
		if v.deferred > 0 && v.serve(now) {
			changed = true
		}
		if v.removed && len(v.served) == 0 {
			delete(a.views, name) // a removed view, let go to the end
			a.absent[name] = now
			changed = true
		}
	}
	if changed {
		if err := a.publishLocked(); err != nil {
			a.cfg.Logger.Error("publishing the agent's table", "err", err)
		}
	}
}

// publishLocked builds the table from the views and wakes the writer.
func (a *Agent) publishLocked() error {
	views := slices.SortedFunc(maps.Values(a.views), func(x, y *view) int { return strings.Compare(x.name, y.name) })
	for _, v := range views {
		a.serial = max(a.serial, v.got.Revision)
	}
	dropped, err := a.bd.build(a.cfg.Table, views, a.serial)
	if err != nil {
		return fmt.Errorf("agent: building the table: %w", err)
	}
	if dropped > 0 {
		a.cfg.Logger.Warn("the agent's table is full; instances left out", "dropped", dropped, "capacity", a.cfg.Table.Capacity())
	}
	a.m.dropped.Set(float64(dropped))
	select {
	case a.dirty <- struct{}{}:
	default:
	}
	return nil
}

// ViewStatus is one view as GET /v1/agent/status reports it.
type ViewStatus struct {
	Name      string    `json:"name"` // "<svc>.<ns>"
	Revision  uint64    `json:"revision"`
	Received  time.Time `json:"received"`
	Refreshed time.Time `json:"refreshed"`
	// AgeSeconds is the time since the view was last known current;
	// Stale says it is older than the DNS server's stale threshold, or
	// restored from disk and not refreshed since.
	AgeSeconds float64 `json:"age_seconds"`
	Stale      bool    `json:"stale"`
	Instances  int     `json:"instances"`
	Eligible   int     `json:"eligible"`
	// Deferred counts withdrawals the client-side shrink cap holds back.
	Deferred int `json:"deferred"`
}

// Status is GET /v1/agent/status.
type Status struct {
	Server    string       `json:"server"`
	Connected bool         `json:"connected"`
	Restored  bool         `json:"restored"`
	Views     []ViewStatus `json:"views"`
	// Absent are names a server said do not exist.
	Absent []string `json:"absent"`
	// LoadError is what was wrong with the views file at start, if
	// anything (the agent started from the previous copy, or from
	// nothing).
	LoadError string `json:"load_error,omitempty"`
}

// Status reports each view; staleAfter is the DNS server's threshold.
func (a *Agent) Status(staleAfter time.Duration) Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Now()
	st := Status{Server: a.server, Connected: a.connected, Restored: a.restored, Views: []ViewStatus{}, Absent: []string{}}
	for _, name := range slices.Sorted(maps.Keys(a.views)) {
		v := a.views[name]
		refreshed := a.refreshedLocked(v, now)
		age := now.Sub(refreshed)
		st.Views = append(st.Views, ViewStatus{Name: name, Revision: v.got.Revision, Received: v.received, Refreshed: refreshed,
			AgeSeconds: age.Seconds(), Stale: a.restored || age > staleAfter, Instances: len(v.got.Instances),
			Eligible: eligible(v.served), Deferred: v.deferred})
	}
	if len(a.absent) > 0 {
		st.Absent = slices.Sorted(maps.Keys(a.absent)) // nil for none, which JSON would show as null
	}
	if a.loadErr != nil {
		st.LoadError = a.loadErr.Error()
	}
	return st
}
