package xdsserver

import (
	"maps"

	"github.com/cairn-sd/cairn/status"
)

// member is one stream's registration with the hub. The place its node
// declared is the client's word; the place it is served from (home) is
// the nearest one the table knows (fold), so that the work of a table
// change grows with the cluster's real localities, never with what
// clients claim (issue 28). Its fields are the hub's, under h.mu.
type member struct {
	sig      *signal
	declared place
	home     *placeState
	// wild and names are what the stream watches, per type: every name,
	// or the names given.
	wild [numTypes]bool
	// names maps each watched name to the member's index among the
	// name's watchers (h.names), so that it leaves them at once.
	names [numTypes]map[string]int
	// With tracks (a delta stream), the hub records what it woke the
	// stream for: the watched names that changed, per type (dirty), or
	// that the whole view may have (all: the stream moved to another
	// place); take hands them over. A wake-up then costs the stream what
	// changed, not every name it watches.
	tracks bool
	dirty  [numTypes]map[string]struct{}
	all    [numTypes]bool
}

// mark records that name of type i changed for m.
func (m *member) mark(i int, name string) {
	if !m.tracks {
		return
	}
	if m.dirty[i] == nil {
		m.dirty[i] = map[string]struct{}{}
	}
	m.dirty[i][name] = struct{}{}
}

// take returns, and forgets, what the stream was woken for of type i
// since it last took it. It must be called before the stream reads its
// view, so that a change it misses is one its view does not hold yet
// (and the next wake-up brings).
func (h *hub) take(m *member, i int) woken {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := woken{all: m.all[i], names: m.dirty[i]}
	m.all[i], m.dirty[i] = false, nil
	return w
}

// localities is what the hub knows of the table's real localities, by
// name (ids are a table's own: a writer may give a name another id in
// its next table): the (region, zone) pairs some instance is in, and the
// regions. A place a client declares is folded onto them (fold).
type localities struct {
	pairs   map[place]bool
	regions map[string]bool
}

func (l localities) equal(o localities) bool {
	return maps.Equal(l.pairs, o.pairs) && maps.Equal(l.regions, o.regions)
}

// fold returns the place a stream that declared p is served from: p
// itself when some instance is in its region and zone; else its region
// without a zone when the region is known (a zone nothing runs in, or a
// zone of another region, is an unknown zone); else no place. The views
// of p and of its fold are the same but for instances with a region and
// no zone, which the folded caller sees in its own tier (as it would any
// caller in a zone the table does not know); so made-up localities share
// the views of real ones instead of each costing a view of its own at
// every table change.
func (l localities) fold(p place) place {
	switch {
	case l.pairs[p]:
		return p
	case l.regions[p.region]:
		return place{region: p.region}
	}
	return place{}
}

// scan reads what a table change needs once, whatever the number of
// places: each service's members' fingerprint (membersFP), and the
// table's localities.
func (h *hub) scan(t *status.Table) {
	fps := make(map[uint32]uint64, len(h.common))
	// The localities by id first: a table has a handful, its members
	// thousands, and a name is hashed once per locality, not per member.
	ids := map[[2]uint16]bool{}
	_ = services(t, func(id uint32, svc status.ServiceInfo) error {
		fps[id] = h.membersFP(t, id, svc)
		for _, slot := range t.Members(id) {
			e := t.Entry(int(slot))
			ids[[2]uint16{e.Region, e.Zone}] = true
		}
		return nil
	})
	l := localities{pairs: make(map[place]bool, len(ids)), regions: map[string]bool{}}
	for id := range ids {
		l.pairs[place{region: t.Locality(id[0]), zone: t.Locality(id[1])}] = true
		if id[0] != 0 {
			l.regions[t.Locality(id[0])] = true
		}
	}
	h.fps = fps
	if !l.equal(h.locs) {
		h.locs, h.rehome = l, true
	}
}

// placeOf returns the state of place p, made (and its view built from
// table t) if no stream was served from it.
func (h *hub) placeOf(t *status.Table, p place) (*placeState, error) {
	if ps := h.places[p]; ps != nil {
		return ps, nil
	}
	ps := &placeState{place: p, assign: map[uint32]svcAssign{}}
	if _, err := h.refreshPlace(t, ps); err != nil {
		return nil, err
	}
	h.places[p] = ps
	return ps, nil
}

// rehomeLocked moves every member to the fold of its declared place in
// table t, after the table's localities changed (rare: a zone's first
// instance, or its last, came or went), and wakes those that moved:
// their view changed.
func (h *hub) rehomeLocked(t *status.Table) {
	h.rehome = false
	for m := range h.members {
		ps, err := h.placeOf(t, h.locs.fold(m.declared))
		if err != nil {
			h.rehome = true // a failure to encode leaves it where it was; the next table tries again
			continue
		}
		if ps == m.home {
			continue
		}
		m.home.members--
		m.home = ps
		ps.members++
		m.all = [numTypes]bool{true, true, true, true}
		m.sig.wake()
	}
	for p, ps := range h.places {
		if ps.members <= 0 {
			delete(h.places, p)
		}
	}
}

// join registers a stream that declared place p and returns it, served
// from the current table.
func (h *hub) join(p place, sig *signal, tracks bool) (*member, error) {
	t := h.pub.Acquire()
	defer t.Release()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.places) == 0 {
		h.follow(t) // the first stream: nothing was kept up to date
	} else {
		h.refreshLocked(t)
	}
	ps, err := h.placeOf(t, h.locs.fold(p))
	if err != nil {
		return nil, err
	}
	m := &member{sig: sig, declared: p, home: ps, tracks: tracks} // names: made by watch, per type asked for
	ps.members++
	h.members[m] = struct{}{}
	h.m.places.Set(float64(len(h.places)))
	return m, nil
}

// leave forgets a stream, and its home with its last stream.
func (h *hub) leave(m *member) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range numTypes {
		delete(h.wild[i], m)
		for name, k := range m.names[i] {
			h.unwatch(i, name, k)
		}
	}
	delete(h.revWait, m)
	delete(h.members, m)
	if m.home.members--; m.home.members <= 0 {
		delete(h.places, m.home.place)
	}
	h.m.places.Set(float64(len(h.places)))
}

// watch changes what a stream watches of type i: every name or not
// (wildcard), and the names added and removed. Its cost is that of the
// change, not of what the stream or its place watch.
func (h *hub) watch(m *member, i int, wildcard bool, add, remove []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m.wild[i] = wildcard; wildcard {
		h.wild[i][m] = struct{}{}
	} else {
		delete(h.wild[i], m)
	}
	for _, name := range add {
		if _, ok := m.names[i][name]; ok || name == wildcardName {
			continue
		}
		if m.names[i] == nil {
			m.names[i] = map[string]int{}
		}
		m.names[i][name] = len(h.names[i][name])
		h.names[i][name] = append(h.names[i][name], m)
	}
	// After the additions, as a delta request's unsubscriptions come
	// after its subscriptions.
	for _, name := range remove {
		if k, ok := m.names[i][name]; ok {
			delete(m.names[i], name)
			h.unwatch(i, name, k)
		}
	}
}

// unwatch removes the watcher at index k from the watchers of name: the
// last takes its index. A name's watchers are a slice, not a set: most
// names (all the made-up ones) have one, which a map would cost some
// 200 bytes for.
func (h *hub) unwatch(i int, name string, k int) {
	ms := h.names[i][name]
	last := len(ms) - 1
	if k != last {
		ms[k] = ms[last]
		ms[k].names[i][name] = k
	}
	ms[last] = nil
	if ms = ms[:last]; len(ms) == 0 {
		delete(h.names[i], name)
	} else {
		h.names[i][name] = ms
	}
}

// waitRev wakes a stream once its home's view is built from a table of
// store revision rev or later: at once if it is already. A stream
// waiting for several revisions is woken at the lowest.
func (h *hub) waitRev(m *member, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v := m.home.view; v != nil && v.rev >= rev {
		m.sig.wake()
		return
	}
	if w, ok := h.revWait[m]; !ok || rev < w {
		h.revWait[m] = rev
	}
}

// view returns the current view a stream is served from.
func (h *hub) view(m *member) *view {
	h.mu.Lock()
	defer h.mu.Unlock()
	return m.home.view
}

// viewsOf returns the current view each book's stream is served from,
// in one hold of the lock.
func (h *hub) viewsOf(books []*ackBook) []*view {
	out := make([]*view, len(books))
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, b := range books {
		out[k] = b.mem.home.view
	}
	return out
}

// wakeLocked wakes the streams that watch what changed: every watcher of
// a changed cluster or listener (the same in every place), and of a
// changed assignment the watchers served from the place it changed in.
func (h *hub) wakeLocked(common [numTypes]map[string]bool, eds map[*placeState]map[string]bool) {
	for _, i := range []int{clusterIdx, listenerIdx} {
		if len(common[i]) == 0 {
			continue
		}
		for m := range h.wild[i] {
			m.sig.wake()
		}
		for name := range common[i] {
			for _, m := range h.names[i][name] {
				m.mark(i, name)
				m.sig.wake()
			}
		}
	}
	for ps, names := range eds {
		for m := range h.wild[endpointIdx] {
			if m.home == ps {
				m.sig.wake()
			}
		}
		for name := range names {
			for _, m := range h.names[endpointIdx][name] {
				if m.home == ps {
					m.mark(endpointIdx, name)
					m.sig.wake()
				}
			}
		}
	}
	for m, rev := range h.revWait {
		if v := m.home.view; v != nil && v.rev >= rev {
			m.sig.wake()
			delete(h.revWait, m)
		}
	}
}
