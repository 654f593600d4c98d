package xdsserver

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/cairn-sd/cairn/wire"
)

// held is an assignment a subscriber acknowledged: its version, and the
// store revision of the table that made that content. Its service is
// read from its name when asked (serviceOf): a stream keeps one of
// these for each name it holds, and two more strings made each some
// 500 bytes a stream of room in the book's map.
type held struct {
	version string
	rev     uint64
}

// serviceOf returns the service an assignment's name is of: "<svc>.<ns>:<port>",
// or an agent's view "<svc>.<ns>".
func serviceOf(name string) (svc, ns string, ok bool) {
	host, _, _ := strings.Cut(name, ":")
	svc, ns, ok = strings.Cut(host, ".")
	return svc, ns, ok
}

// ackBook is what one stream's subscriber has acknowledged of the
// assignments, for the API's "who is behind" (SPEC §6, issue 11 item
// 9). The stream writes it as acknowledgements come; the API reads it.
type ackBook struct {
	mem  *member // the stream's registration with the hub
	mu   sync.Mutex
	held map[string]held // by assignment name
	// watching is the assignments the subscriber named, shared with the
	// stream, never modified: one it holds nothing of yet is behind, at
	// revision 0.
	watching []string
}

// watch records the assignments the subscriber names; the book keeps
// names, which its caller must not modify.
func (b *ackBook) watch(names []string) {
	b.mu.Lock()
	b.watching = names
	b.mu.Unlock()
}

// set records that the subscriber holds r under name.
func (b *ackBook) set(name string, r resource) {
	b.mu.Lock()
	b.held[name] = held{version: r.version, rev: r.rev}
	b.mu.Unlock()
}

// drop records that the subscriber holds nothing under name.
func (b *ackBook) drop(name string) {
	b.mu.Lock()
	delete(b.held, name)
	b.mu.Unlock()
}

// replace records that the subscriber holds exactly names of v (a state
// of the world response).
func (b *ackBook) replace(v *view, names []string) {
	b.mu.Lock()
	clear(b.held)
	for _, n := range names {
		r := v.res[endpointIdx][n]
		b.held[n] = held{version: r.version, rev: r.rev}
	}
	b.mu.Unlock()
}

// books is the set of open streams' ack books.
type books struct {
	mu  sync.Mutex
	all map[*ackBook]struct{}
}

func (bs *books) open(m *member) *ackBook {
	b := &ackBook{mem: m, held: map[string]held{}}
	bs.mu.Lock()
	if bs.all == nil {
		bs.all = map[*ackBook]struct{}{}
	}
	bs.all[b] = struct{}{}
	bs.mu.Unlock()
	return b
}

func (bs *books) close(b *ackBook) {
	bs.mu.Lock()
	delete(bs.all, b)
	bs.mu.Unlock()
}

// Subscribers returns this server's xDS subscribers holding assignments
// of the service ns/svc, grouped by the store revision of what they
// acknowledged, and how many of them hold something other than what
// their place's current view has. A subscriber holding several of the
// service's assignments (one per port) counts once, at the oldest.
// Its cost is a pass over the open streams; it takes no lock a stream
// waits on for longer than one stream's read.
func (s *Server) Subscribers(ns, svc string) wire.XDSSubscribers {
	out, _ := s.tally(func(n, v string) bool { return n == ns && v == svc })
	return out
}

// SubscribersSummary is Subscribers over every service, with the count
// of open streams, for this node's status (issue 14 item 7): a
// subscriber holding or naming assignments of several services counts
// once, at the oldest revision it holds of any, and behind when it is
// behind on any. A stream that named no assignment yet (or only
// listeners, routes and clusters) counts in Streams alone. Same cost as
// Subscribers.
func (s *Server) SubscribersSummary() wire.XDSSummary {
	subs, streams := s.tally(func(string, string) bool { return true })
	return wire.XDSSummary{Streams: streams, XDSSubscribers: subs}
}

// tally groups the open streams' subscribers of the services match
// accepts by the oldest store revision they acknowledged of those
// services' assignments, and returns them with the number of open
// streams.
func (s *Server) tally(match func(ns, svc string) bool) (wire.XDSSubscribers, int) {
	s.books.mu.Lock()
	all := make([]*ackBook, 0, len(s.books.all))
	for b := range s.books.all {
		all = append(all, b)
	}
	s.books.mu.Unlock()

	type group struct{ n, behind int }
	byRev := map[uint64]*group{}
	out := wire.XDSSubscribers{Revisions: []wire.XDSRevision{}}
	views := s.hub.viewsOf(all)
	for k, b := range all {
		v := views[k]
		found, behind, oldest := false, false, uint64(0)
		count := func(rev uint64, late bool) {
			if !found || rev < oldest {
				oldest = rev
			}
			found, behind = true, behind || late
		}
		b.mu.Lock()
		for name, h := range b.held {
			if svc, ns, ok := serviceOf(name); ok && match(ns, svc) {
				count(h.rev, v == nil || v.res[endpointIdx][name].version != h.version)
			}
		}
		for _, name := range b.watching {
			if _, ok := b.held[name]; ok {
				continue
			}
			if svc, ns, _, ok := parseClusterName(name); !ok || !match(ns, svc) {
				continue
			}
			if v != nil {
				if _, exists := v.res[endpointIdx][name]; exists {
					count(0, true) // named, existing, and nothing of it acknowledged
				}
			}
		}
		b.mu.Unlock()
		if !found {
			continue
		}
		g := byRev[oldest]
		if g == nil {
			g = &group{}
			byRev[oldest] = g
		}
		g.n++
		out.Subscribers++
		if behind {
			g.behind++
			out.Behind++
		}
	}
	for rev, g := range byRev {
		out.Revisions = append(out.Revisions, wire.XDSRevision{Revision: rev, Subscribers: g.n, Behind: g.behind})
	}
	slices.SortFunc(out.Revisions, func(a, b wire.XDSRevision) int { return cmp.Compare(b.Revision, a.Revision) })
	return out, len(all)
}
