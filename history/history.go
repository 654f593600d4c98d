package history

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/status"
)

// Config configures a History. A zero field means its default.
type Config struct {
	// Table is the publisher whose tables are recorded. Required.
	Table *status.Publisher
	// Window is how long a step is kept at least. Defaults to 24h.
	Window time.Duration
	// Changes is how many of each namespace's newest steps (tables that
	// changed it) are kept at least, however old. Defaults to
	// DefaultChanges.
	Changes int
	// Bytes bounds the memory the steps hold, over every namespace; it
	// wins over Window and Changes. Defaults to DefaultBytes.
	Bytes int
	// Synced, Restored, StaleAfter and MaxStale are the DNS server's
	// serve-stale rule (dnsserver.Config), which the freshness timeline
	// records: Synced is when this node's view was last known current
	// (zero: never since it started), Restored whether it serves the
	// table kept on disk. nil Synced: always fresh.
	Synced     func() time.Time
	Restored   func() bool
	StaleAfter time.Duration
	MaxStale   time.Duration
	// Tick is how often Run looks at the freshness between tables, and
	// writes the file. Defaults to 1s.
	Tick time.Duration
	// Path is the history's file: read at New, so that the history
	// answers for the time before a restart, and written by Run. "":
	// in memory only.
	Path string

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// The defaults (sized in docs/benchmarks/history.md).
const (
	DefaultWindow  = 24 * time.Hour
	DefaultChanges = 1_000
	DefaultBytes   = 16 << 20
)

func (c *Config) setDefaults() {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Changes == 0 {
		c.Changes = DefaultChanges
	}
	if c.Bytes == 0 {
		c.Bytes = DefaultBytes
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 5 * time.Second
	}
	if c.MaxStale == 0 {
		c.MaxStale = 24 * time.Hour
	}
	if c.Tick == 0 {
		c.Tick = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	switch {
	case c.Table == nil:
		return errors.New("history: Table is required")
	case c.Window < 0:
		return errors.New("history: Window must not be negative")
	case c.Changes < 0:
		return errors.New("history: Changes must not be negative")
	case c.Bytes < 0:
		return errors.New("history: Bytes must not be negative")
	}
	return nil
}

// History records a node's published tables. Its methods are safe for
// concurrent use; Run is its one goroutine.
type History struct {
	cfg     Config
	m       *metrics
	started time.Time

	mu sync.Mutex
	// The services recorded, by "namespace/name", and the bytes held
	// per namespace (see trim).
	services  map[string]*service
	ids       []*service // by id; nil: never, or forgotten
	logs      map[string]*nsLog
	largestNS nsHeap // the namespaces holding a step, most first
	held      int    // bytes held over every namespace (step.cost)
	// locNames and locIDs intern the locality names the recorded entries
	// refer to (Entry.Region, Entry.Zone), so that ids stay valid across
	// tables and restarts; id 0 is the empty name.
	locNames []string
	locIDs   map[string]uint16
	fresh    []freshStep
	// origin is when the history began: the first table it recorded, on
	// this node (kept in the file). A service first seen later had no
	// endpoints in this node's tables before.
	origin time.Time

	// What the last table recorded said: its entries as it held them
	// (32 bytes a slot, all the history keeps per slot), read with its
	// name maps (below) when a slot changed.
	seen     uint64 // the version of the last table recorded
	raw      []status.Entry
	remapped bool // the table being recorded has other name lists
	// The last table's name lists, and what their ids map to.
	tableLocs *status.Names
	locMap    []uint16
	tableSvcs *status.Names
	dir       *status.Directory
	svcMap    []*service
	gen       uint64 // counts the svcMaps made
	pass      uint64 // counts the walks of steps (touching)
	touched   []*nsLog

	file    *file  // nil without Config.Path
	pending []byte // framed records for the file
}

// New validates cfg and returns a History; Run records.
func New(cfg Config) (*History, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &History{cfg: cfg, m: newMetrics(cfg.Registerer), started: cfg.Now(), services: map[string]*service{},
		ids: []*service{nil}, logs: map[string]*nsLog{}, locNames: []string{""}, locIDs: map[string]uint16{"": 0}}
	if cfg.Path != "" {
		if err := h.load(cfg.Path); err != nil {
			return nil, err
		}
		h.pending = h.pending[:0] // the localities read: in the file already
	}
	return h, nil
}

// Run records every table published, and the node's freshness at each
// and every Tick, and writes the file every Tick, until ctx is done.
func (h *History) Run(ctx context.Context) error {
	tick := time.NewTicker(h.cfg.Tick)
	defer tick.Stop()
	defer h.close()
	var seen uint64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.cfg.Table.Changed(seen):
			if t := h.cfg.Table.Acquire(); t != nil {
				seen = t.Version()
				h.Record(t)
				t.Release()
			}
		case <-tick.C:
			h.mu.Lock()
			h.noteFreshness(h.cfg.Now())
			h.mu.Unlock()
			h.flush()
		}
	}
}

// Record records table t, if it is newer than the last one recorded:
// the steps of the services whose entries changed, and the node's
// freshness. Run calls it for each table; a test may call it itself.
func (h *History) Record(t *status.Table) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t.Version() <= h.seen {
		return
	}
	start := time.Now()
	h.seen = t.Version()
	at := t.Built()
	last := names{loc: h.locMap, svc: h.svcMap, dir: h.dir}
	if h.origin.IsZero() {
		h.origin = at
		h.emit(originRecord(at))
	}
	h.follow(t, at)
	h.diff(t, last)
	for _, l := range h.touched {
		st := step{nanos: at.UnixNano(), version: t.Version(), revision: t.StoreRevision(), data: slices.Clone(l.pending)}
		if len(l.pendingInfos) > 0 {
			st.infos = slices.Clone(l.pendingInfos)
		}
		h.add(l, st)
		if h.file != nil {
			h.emit(stepRecord(l.ns, &st))
		}
		l.pending = l.pending[:0]
		clear(l.pendingInfos)
		l.pendingInfos = l.pendingInfos[:0]
	}
	h.touched = h.touched[:0]
	now := h.cfg.Now()
	h.noteFreshness(now)
	h.trim(now)
	h.m.record.Observe(time.Since(start).Seconds())
	h.m.held.Set(float64(h.held))
	h.m.services.Set(float64(len(h.services)))
}

// follow brings the name maps to t's: the interned ids of its
// localities, and the service of each of its service ids, noting the
// definitions that changed.
func (h *History) follow(t *status.Table, at time.Time) {
	h.remapped = false
	if n := t.Capacity(); len(h.raw) != n {
		h.raw = grow(h.raw, n)
	}
	if locs := t.Localities(); locs != h.tableLocs || h.locMap == nil {
		h.tableLocs, h.remapped = locs, true
		h.locMap = make([]uint16, locs.Len())
		for id := range h.locMap {
			h.locMap[id] = h.intern(locs.Name(uint32(id)))
		}
	}
	dir := t.Directory()
	if svcs := t.Services(); svcs != h.tableSvcs || dir != h.dir || h.svcMap == nil {
		h.tableSvcs, h.dir, h.remapped = svcs, dir, true
		h.svcMap = make([]*service, svcs.Len())
		h.gen++
		for id := 1; id < svcs.Len(); id++ {
			s := h.service(svcs.Name(uint32(id)))
			s.gen = h.gen
			h.svcMap[id] = s
			if info, ok := dir.Service(uint32(id)); ok && !sameService(s.info(), info) {
				s.infos = append(s.infos, infoStep{at: at, info: info})
				if r, err := infoRecord(s.key, infoStep{at: at, info: info}); err == nil && h.file != nil {
					h.emit(r)
				}
				if len(s.infos) > maxInfos {
					s.infos = slices.Delete(s.infos, 0, len(s.infos)-maxInfos)
				}
			}
		}
	}
}

// maxInfos bounds the definitions kept per service: they change rarely,
// and a replay older than the oldest kept reads the oldest.
const maxInfos = 64

// names are a table's name maps, as the history reads its entries.
type names struct {
	loc []uint16
	svc []*service
	dir *status.Directory
}

// read returns what raw, slot's entry in a table of names n, says: its
// service (nil: unused, or of no service), the entry with the history's
// locality ids and Service cleared, and its instance.
func (n names) read(slot int, raw status.Entry) (*service, status.Entry, *status.InstanceInfo) {
	if !raw.Used() || int(raw.Service) >= len(n.svc) || n.svc[raw.Service] == nil {
		return nil, status.Entry{}, nil
	}
	loc := func(id uint16) uint16 {
		if int(id) < len(n.loc) {
			return n.loc[id]
		}
		return 0
	}
	s := n.svc[raw.Service]
	raw.Region, raw.Zone, raw.Service = loc(raw.Region), loc(raw.Zone), 0
	return s, raw, n.dir.Instance(slot)
}

// diff compares every slot of t with what the last table (of names
// last) said, and notes each change in its service's pending list.
// While the table's name lists are the last one's, a slot whose entry
// and instance are the last table's is unchanged, and that is all it
// looks at.
func (h *History) diff(t *status.Table, last names) {
	dir := t.Directory()
	now := names{loc: h.locMap, svc: h.svcMap, dir: dir}
	for slot := range t.Capacity() {
		raw, was := t.Entry(slot), h.raw[slot]
		if !h.remapped && raw == was && (!raw.Used() || dir.Instance(slot) == last.dir.Instance(slot)) {
			continue
		}
		if raw != was {
			h.raw[slot] = raw // an unused slot stays unwritten, and unbacked
		}
		s, e, info := now.read(slot, raw)
		oldS, old, oldInfo := last.read(slot, was)
		sameInfo := info == oldInfo || sameInstance(info, oldInfo)
		if s == oldS && e == old && sameInfo {
			continue
		}
		if oldS != nil && oldS != s {
			l := h.note(oldS)
			l.pending = appendServiceChange(l.pending, oldS.id, uint32(slot), status.Entry{}, status.Entry{}, true, false) // the slot left the service
		}
		if s != nil {
			if s != oldS {
				old = status.Entry{} // new to the service: every field
			}
			withInfo := s != oldS || !sameInfo
			l := h.note(s)
			l.pending = appendServiceChange(l.pending, s.id, uint32(slot), old, e, false, withInfo)
			if withInfo {
				l.pendingInfos = append(l.pendingInfos, info)
			}
		}
	}
}

// note marks s's namespace as changed by the table being recorded, and
// returns its log.
func (h *History) note(s *service) *nsLog {
	l := s.log
	if len(l.pending) == 0 {
		h.touched = append(h.touched, l)
	}
	return l
}

// intern returns name's id in the history's locality names.
func (h *History) intern(name string) uint16 {
	if id, ok := h.locIDs[name]; ok {
		return id
	}
	if len(h.locNames) > 1<<16-1 {
		return 0 // the table's ids are 16 bits too: never reached
	}
	id := uint16(len(h.locNames))
	h.locNames = append(h.locNames, name)
	h.locIDs[name] = id
	h.emit(localityRecord(name))
	return id
}

// service returns the recorded service of key "namespace/name", made on
// first sight with the next id.
func (h *History) service(key string) *service {
	s := h.services[key]
	if s == nil {
		s = h.serviceWith(key, uint32(len(h.ids)))
		h.emit(serviceRecord(s))
	}
	return s
}

// serviceWith makes the service key with id (a file's).
func (h *History) serviceWith(key string, id uint32) *service {
	s := newService(key, id, h.log)
	h.services[key] = s
	for int(id) >= len(h.ids) {
		h.ids = append(h.ids, nil)
	}
	h.ids[id] = s
	return s
}

// grow returns s with length n, keeping what it holds below n.
//
// A new array is made, not appended to: appending copies a zeroed
// array in, which touches every page of it (3.2 MB at the default
// capacity) where a made one is backed only as slots are written.
func grow[T any](s []T, n int) []T {
	if n <= len(s) {
		clear(s[n:])
		return s[:n]
	}
	out := make([]T, n)
	copy(out, s)
	return out
}

// sameService reports whether two definitions answer alike.
func sameService(a, b status.ServiceInfo) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && slices.Equal(a.Ports, b.Ports) &&
		a.DNSTTL == b.DNSTTL && a.ARecordLimit == b.ARecordLimit && a.MinHealthyFraction == b.MinHealthyFraction &&
		a.MaxEjectionPercent == b.MaxEjectionPercent && a.ShrinkCap == b.ShrinkCap && a.ShrinkWindow == b.ShrinkWindow
}

// sameInstance reports whether two instances are the same one at the
// same addresses and ports (a directory made afresh, after a restart,
// holds new pointers to the same instances).
func sameInstance(a, b *status.InstanceInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ID == b.ID && a.Incarnation == b.Incarnation && slices.Equal(a.Addrs, b.Addrs) && maps.Equal(a.Ports, b.Ports)
}

// Stats counts what the history holds: services, steps, and the bytes
// the steps hold (as Config.Bytes counts them).
type Stats struct {
	Services, Steps, Bytes int
}

// Stats returns what the history holds now.
func (h *History) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := Stats{Services: len(h.services), Bytes: h.held}
	for _, l := range h.logs {
		st.Steps += len(l.live())
	}
	return st
}
