package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/keepalive"

	"github.com/cairn-sd/cairn/internal/agentview"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/tablefile"
)

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
	w      *status.Writer
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
	if cfg.Keepalive.Time <= 0 {
		cfg.Keepalive = keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}
	}
	cfg.Keepalive.PermitWithoutStream = true
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
		fresh: map[string]bool{}, dropped: map[string]bool{}, pinned: map[string]bool{}, w: status.NewWriter(cfg.Table, status.WriterConfig{}),
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

// ViewRevision is dnsserver.Config.Revision: the store revision of the
// view of ns/svc the agent holds, which an answer about the service
// carries when asked (dnsserver.RevisionOption). It is the view's the
// table was built from, but for the moments between a view's arrival
// and the table built from it.
func (a *Agent) ViewRevision(ns, svc string) (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.views[agentview.Name(ns, svc)]
	if v == nil || v.got == nil {
		return 0, false
	}
	return v.got.Revision, true
}

// Restored reports whether the agent answers from disk, no server having
// answered since it started (dnsserver.Config.Restored).
func (a *Agent) Restored() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.restored
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
	dropped, err := build(a.w, views, a.serial)
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

// Follow makes services ("<ns>/<svc>") the views the agent keeps
// subscribed to, in place of Config.Services: a server that follows
// another region's views names the services its own table holds, and
// names them again when they change. A service no longer named is
// unsubscribed and its view let go; a name that is not NAMESPACE/SERVICE
// is skipped. Views held of any other service (restored from disk, say)
// are let go too.
func (a *Agent) Follow(services []string) {
	next := make(map[string]bool, len(services))
	for _, s := range services {
		if ns, svc, ok := splitService(s); ok {
			next[agentview.Name(ns, svc)] = true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	wake, let := false, false
	for name := range next {
		if a.pinned[name] {
			continue
		}
		a.pinned[name] = true
		delete(a.unknown, name)
		if !a.want[name] {
			a.want[name], a.fresh[name] = true, true
			delete(a.dropped, name)
			wake = true
		}
	}
	// Every other name goes, pinned or not: restored from disk, or
	// named before.
	for name := range a.want {
		if next[name] {
			continue
		}
		delete(a.pinned, name)
		delete(a.want, name)
		delete(a.fresh, name)
		delete(a.unknown, name)
		a.dropped[name] = true
		wake = true
	}
	for name := range a.views {
		if !next[name] {
			delete(a.views, name)
			let = true
		}
	}
	if let {
		if err := a.publishLocked(); err != nil {
			a.cfg.Logger.Error("publishing the agent's table", "err", err)
		}
	}
	if wake {
		a.wakeLocked()
	}
}
