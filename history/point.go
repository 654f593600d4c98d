package history

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// ErrUnknown is returned for a service this node has no history of.
var ErrUnknown = errors.New("history: no history of this service on this node")

// TooOldError is returned for a time before the oldest this node's
// history of the service answers for.
type TooOldError struct {
	Key   string
	Since time.Time
}

func (e *TooOldError) Error() string {
	return fmt.Sprintf("history: this node's history of %s starts at %s", e.Key, e.Since.UTC().Format(time.RFC3339Nano))
}

// Point is a service's part of the table this node published at a time:
// what its DNS and xDS servers answered from.
type Point struct {
	Namespace, Service string
	// At is when the table in force was built; Version and Revision are
	// its version and store revision.
	At                time.Time
	Version, Revision uint64
	// Freshness is the node's at the time asked, by the serve-stale
	// rule, and Synced when its view was last known current then (zero
	// when fresh).
	Freshness Freshness
	Synced    time.Time
	// Since is the oldest time the history of the service answers for.
	Since   time.Time
	Info    status.ServiceInfo
	Members []Member // in slot order
}

// Member is one slot of the service: its entry (Region and Zone are
// ids the Point's tables do not share: read the names), its instance.
type Member struct {
	Slot         uint32
	Entry        status.Entry
	Instance     *status.InstanceInfo
	Region, Zone string
}

// Change is one slot's change in a step: Before is its member before
// (zero Entry: the slot was not the service's), After after (zero Entry:
// it left the service).
type Change struct {
	At                time.Time
	Version, Revision uint64
	Before, After     Member
}

// At returns the service's part of the table in force at t: none of it
// (no members) at a time after the history began and before the service
// was first in a table.
func (h *History) At(ns, svc string, t time.Time) (*Point, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.lookup(ns, svc, t)
	if old := (*TooOldError)(nil); errors.As(err, &old) && s.baseAt.IsZero() && !h.origin.IsZero() && !t.Before(h.origin) {
		p := h.point(s, map[uint32]member{}, h.origin, 0, 0, t)
		p.Since = h.origin
		return p, nil
	}
	if err != nil {
		return nil, err
	}
	members := maps.Clone(s.base)
	at, version, revision := s.baseAt, s.baseVersion, s.baseRevision
	live := s.log.live()
	for i := range live {
		st := &live[i]
		if st.time().After(t) {
			break
		}
		if s.apply(st, members, nil) {
			at, version, revision = st.time(), st.version, st.revision
		}
	}
	return h.point(s, members, at, version, revision, t), nil
}

// AtRevision returns the states the service had in tables built at
// store revision rev, oldest first: the state carried in from an older
// revision, then the state after each step at rev. Without a step at rev,
// it is one: the state in force when rev was the store's latest. A
// response's version names the revision, not which of these it came
// from: its digest tells (package replay).
func (h *History) AtRevision(ns, svc string, rev uint64) ([]*Point, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.lookup(ns, svc, time.Time{})
	if err != nil && !errors.As(err, new(*TooOldError)) {
		return nil, err
	}
	if s.baseRevision > rev || s.baseAt.IsZero() && !s.first.IsZero() && s.firstRevision > rev {
		return nil, fmt.Errorf("history: this node's history of %s starts at revision %d", s.key, max(s.baseRevision, s.firstRevision))
	}
	members := maps.Clone(s.base)
	at, version, revision := s.baseAt, s.baseVersion, s.baseRevision
	var out []*Point
	live := s.log.live()
	for i := range live {
		st := &live[i]
		if st.revision > rev {
			break
		}
		if !s.changedBy(st) {
			continue
		}
		if st.revision == rev && len(out) == 0 && !at.IsZero() {
			out = append(out, h.point(s, maps.Clone(members), at, version, revision, st.time()))
		}
		s.apply(st, members, nil)
		at, version, revision = st.time(), st.version, st.revision
		if st.revision == rev {
			out = append(out, h.point(s, maps.Clone(members), at, version, revision, st.time()))
		}
	}
	if len(out) == 0 {
		out = append(out, h.point(s, members, at, version, revision, at))
	}
	return out, nil
}

// Changes returns the changes of the service's steps built in (from, to],
// oldest first.
func (h *History) Changes(ns, svc string, from, to time.Time) ([]Change, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.lookup(ns, svc, time.Time{})
	if err != nil && !errors.As(err, new(*TooOldError)) {
		return nil, err
	}
	members := maps.Clone(s.base)
	var out []Change
	live := s.log.live()
	for i := range live {
		st := &live[i]
		at := st.time()
		if at.After(to) {
			break
		}
		var f func(slot uint32, before, after member)
		if at.After(from) {
			f = func(slot uint32, before, after member) {
				out = append(out, Change{At: at, Version: st.version, Revision: st.revision,
					Before: h.memberOf(slot, before), After: h.memberOf(slot, after)})
			}
		}
		s.apply(st, members, f)
	}
	return out, nil
}

// lookup returns the service, and an error if t (unless zero) is before
// its history.
func (h *History) lookup(ns, svc string, t time.Time) (*service, error) {
	s := h.services[ns+"/"+svc]
	if s == nil {
		return nil, ErrUnknown
	}
	if since := s.since(); !t.IsZero() && (since.IsZero() || t.Before(since)) {
		return s, &TooOldError{Key: s.key, Since: since}
	}
	return s, nil
}

// since is the oldest time the service's history answers for: its last
// step let go, else its first step.
func (s *service) since() time.Time {
	if !s.baseAt.IsZero() {
		return s.baseAt
	}
	return s.first
}

// apply applies st's changes of s to members, calling f (if set) for
// each, and reports whether st changed s.
func (s *service) apply(st *step, members map[uint32]member, f func(slot uint32, before, after member)) bool {
	changed := false
	var g func(id, slot uint32, before, after member)
	if f != nil {
		g = func(_, slot uint32, before, after member) { f(slot, before, after) }
	}
	_ = st.each(func(id uint32) map[uint32]member {
		if id != s.id {
			return nil
		}
		changed = true
		return members
	}, g)
	return changed
}

// changedBy reports whether st changes s.
func (s *service) changedBy(st *step) bool {
	changed := false
	_ = st.each(func(id uint32) map[uint32]member {
		changed = changed || id == s.id
		return nil
	}, nil)
	return changed
}

// point makes a Point of members, asked for at t.
func (h *History) point(s *service, members map[uint32]member, at time.Time, version, revision uint64, t time.Time) *Point {
	ns, name := s.ns, s.key[len(s.ns)+1:]
	p := &Point{Namespace: ns, Service: name, At: at, Version: version, Revision: revision, Since: s.since(), Info: s.infoAt(t)}
	p.Freshness, p.Synced = h.freshnessAt(t)
	for _, slot := range slices.Sorted(maps.Keys(members)) {
		p.Members = append(p.Members, h.memberOf(slot, members[slot]))
	}
	return p
}

func (h *History) memberOf(slot uint32, m member) Member {
	if !m.entry.Used() {
		return Member{Slot: slot}
	}
	return Member{Slot: slot, Entry: m.entry, Instance: m.info,
		Region: h.locNames[m.entry.Region], Zone: h.locNames[m.entry.Zone]}
}

// Table makes a status table holding only the Point's service (id 1),
// its members in slots 0, 1, …, for the DNS and xDS servers' answer code
// to read; places are locality names a caller may be asked about, so
// that the table knows them as the node's did. The table's version is
// 1; the Point's says which table it stands for.
func (p *Point) Table(places ...string) (*status.Publisher, error) {
	n := max(len(p.Members), 1)
	pub, err := status.New(status.Config{Capacity: n, Tables: 2, Now: func() time.Time { return p.At }})
	if err != nil {
		return nil, err
	}
	var locs []string
	for _, m := range p.Members {
		locs = append(locs, m.Region, m.Zone)
	}
	names := status.NewNames(append(locs, places...)...)
	info := p.Info
	info.Namespace, info.Name = p.Namespace, p.Service
	_, err = pub.Build(func(b *status.Builder) error {
		es := b.Entries()
		clear(es)
		d := &status.Directory{Revision: p.Revision, Services: []status.ServiceInfo{{}, info},
			Instances: make([]*status.InstanceInfo, len(es))}
		for i, m := range p.Members {
			e := m.Entry
			r, _ := names.ID(m.Region)
			z, _ := names.ID(m.Zone)
			e.Service, e.Region, e.Zone = 1, uint16(r), uint16(z)
			es[i] = e
			d.Instances[i] = m.Instance
		}
		d.Index(func(slot int) uint32 { return es[slot].Service }, nil)
		b.SetStoreRevision(p.Revision)
		b.SetServices(status.NewNames(p.Namespace + "/" + p.Service))
		b.SetLocalities(names)
		b.SetDirectory(d)
		return nil
	})
	return pub, err
}
