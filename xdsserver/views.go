package xdsserver

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cairn-sd/cairn/internal/agentview"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/cairn-sd/cairn/status"
)

// Each resource type's index in typeURLs, the wildcard subscription's
// name, and the bytes of SHA-256 a response's version carries.
const (
	numTypes       = 4
	clusterIdx     = 0
	endpointIdx    = 1
	listenerIdx    = 2
	routeIdx       = 3
	wildcardName   = "*"
	versionDigestN = 16 // bytes of SHA-256 in a response's version
)

// typeURLs are the resource types a stream may ask for (go-control-plane's
// names), in the order they are sent when several changed at once:
// clusters before the assignments that fill them, both before the
// listeners that route to them (make-before-break, as the xDS protocol
// asks).
var typeURLs = [numTypes]string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}

// typeIndex returns the index of a type URL, or false for one cairn
// does not serve.
func typeIndex(url string) (int, bool) {
	i := slices.Index(typeURLs[:], url)
	return i, i >= 0
}

// resource is one resource as sent: encoded once per content.
type resource struct {
	// version is the content's digest (Digest): its identity. What goes
	// on the wire is FormatVersion of it and the revision of the table it
	// is sent from.
	version string
	body    *anypb.Any
	// ns and svc name the service the resource belongs to: what a
	// token must allow to see it.
	ns, svc string
	// changed is when the table that last changed this resource was
	// built: where its delivery is timed from. withdraws says that change
	// took an endpoint out of rotation (an assignment that lost one, or
	// marked it draining): it travels in the withdrawal lane.
	changed   time.Time
	withdraws bool
	// rev is the store revision of that table: what `cairn endpoints`
	// shows a subscriber holds.
	rev uint64
	// rotation lists an assignment's endpoints in rotation (HEALTHY or
	// UNKNOWN), sorted, to tell the next change's lane; for an agent's
	// view, the ids of the instances in rotation.
	rotation []string
}

// place is a subscriber's node locality, by name: the key of a view.
type place struct{ region, zone string }

// view is every resource of one table version as seen from one place:
// the assignments' priorities depend on the place, the rest does not.
// It is immutable once made, and shared by every stream of that place.
type view struct {
	table uint64 // the table's version
	// rev is the store revision of the table the view was built from:
	// every delta response names it (system_version_info), so that an
	// agent can tell a server's word that a view does not exist from an
	// older table than the view it holds.
	rev   uint64
	built time.Time // when the table was built: the origin of removals
	res   [numTypes]map[string]resource
}

// signal tells one stream that a resource it watches changed. It holds
// at most one pending wake-up: a stream that is busy when several
// changes come sends their sum once.
type signal struct{ ch chan struct{} }

func newSignal() *signal { return &signal{ch: make(chan struct{}, 1)} }

func (s *signal) wake() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// svcCommon is one service's clusters and listeners, kept while the
// service's definition is unchanged.
type svcCommon struct {
	fp                  uint64
	clusters, listeners map[string]resource
}

// svcAssign is one service's assignments for one place, kept while the
// service's definition and its members' entries are unchanged.
type svcAssign struct {
	fp      uint64
	res     map[string]resource
	dropped int
}

// placeState is what the hub keeps for the streams served from one
// place (their home, see fold).
type placeState struct {
	place   place
	loc     status.Locality // the place's ids in the tables the views were built from
	members int
	view    *view
	assign  map[uint32]svcAssign // by service id
	dropped int
}

// hub turns each published table into resources, once per place that
// streams are served from, and wakes only the streams watching a
// resource that changed. A service whose definition and members did not
// change keeps its encoded resources from one table to the next, so the
// cost of a table is the cost of what changed in it, and a change
// reaches the streams it concerns rather than every stream. The places
// are the table's real localities (fold), whatever the clients declare.
type hub struct {
	pub  *status.Publisher
	m    *metrics
	seed maphash.Seed
	lrs  bool // clusters name this server for load reports

	mu     sync.Mutex
	table  uint64
	common map[uint32]svcCommon // by service id
	// fps is each service's membersFP in the current table, computed
	// once per table for every place.
	fps map[uint32]uint64
	// locs is the current table's localities; rehome says they changed
	// since the members were last folded onto them.
	locs   localities
	rehome bool
	// views are the agents' views (package agentview), by service id:
	// the same from every place, so built once per change of the
	// service's members, whichever place's refresh comes first.
	views map[uint32]svcView
	// clusters and listeners of the current table, shared by every place
	clusters, listeners map[string]resource
	// dir is the directory the clusters and listeners were built from,
	// all of them (nil after a service failed to build): a table with the
	// same directory has the same definitions (status.Directory is
	// immutable), such as a withdrawal published on commit.
	dir     *status.Directory
	places  map[place]*placeState
	members map[*member]struct{}
	// names holds, per type, the streams watching each name; wild the
	// streams watching every name of the type. revWait holds the streams
	// holding something back until their view's store revision reaches
	// the one given (see waitRev).
	names   [numTypes]map[string][]*member
	wild    [numTypes]map[*member]struct{}
	revWait map[*member]uint64
}

func newHub(pub *status.Publisher, m *metrics) *hub {
	h := &hub{pub: pub, m: m, seed: maphash.MakeSeed(), common: map[uint32]svcCommon{}, views: map[uint32]svcView{},
		places: map[place]*placeState{}, members: map[*member]struct{}{}, revWait: map[*member]uint64{}}
	for i := range numTypes {
		h.names[i], h.wild[i] = map[string][]*member{}, map[*member]struct{}{}
	}
	return h
}

// tableSeen returns the version of the last table the hub followed.
func (h *hub) tableSeen() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.table
}

// run follows the published tables until ctx is done: for each, it
// rebuilds what changed and wakes the streams watching it.
func (h *hub) run(ctx context.Context) {
	var seen uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.pub.Changed(seen):
		}
		seen = h.refresh()
	}
}

// refresh brings every place's view to the current table, waking the
// streams whose resources changed, and returns the table's version.
func (h *hub) refresh() uint64 {
	t := h.pub.Acquire()
	defer t.Release()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refreshLocked(t)
	return h.table
}

// refreshLocked is refresh, with h.mu held and t acquired.
func (h *hub) refreshLocked(t *status.Table) {
	if t.Version() == h.table && h.clusters != nil {
		return
	}
	h.m.refreshes.Inc()
	if len(h.places) == 0 {
		// No stream to serve: build nothing (a server without xDS
		// subscribers spends its core on DNS), and build afresh for the
		// first stream that comes. The table is followed all the same, or
		// run would wake for it again at once.
		h.table, h.clusters, h.listeners, h.dir = t.Version(), nil, nil, nil
		return
	}
	common := h.follow(t)
	eds := map[*placeState]map[string]bool{}
	for _, ps := range h.places {
		// A failure to encode leaves the place on its previous view; the
		// next table tries again.
		if changed, err := h.refreshPlace(t, ps); err == nil && len(changed) > 0 {
			eds[ps] = changed
		}
	}
	if h.rehome {
		// After the places are up to date: a member that moves finds its
		// new home at table t, built if new.
		h.rehomeLocked(t)
	}
	h.wakeLocked(common, eds)
	h.m.places.Set(float64(len(h.places)))
}

// follow brings the clusters and listeners to table t, and what every
// place's refresh reads of it once (scan); it returns the names that
// changed, by type.
func (h *hub) follow(t *status.Table) [numTypes]map[string]bool {
	changed := h.refreshCommon(t)
	h.scan(t)
	return changed
}

// refreshCommon brings the clusters and listeners to table t, reusing a
// service's while its definition is unchanged, and returns the names
// that changed, by type (nil for the other types).
func (h *hub) refreshCommon(t *status.Table) (changed [numTypes]map[string]bool) {
	h.table = t.Version()
	dir := t.Directory()
	if dir != nil && dir == h.dir && h.clusters != nil {
		return changed // the same definitions: nothing to look at
	}
	h.dir = dir
	seen := map[uint32]bool{}
	rebuilt := h.clusters == nil
	_ = services(t, func(id uint32, svc status.ServiceInfo) error {
		seen[id] = true
		fp := h.serviceFP(svc)
		if c, ok := h.common[id]; ok && c.fp == fp {
			return nil
		}
		rebuilt = true
		c := svcCommon{fp: fp, clusters: map[string]resource{}, listeners: map[string]resource{}}
		if err := buildCommon(svc, h.lrs, c.clusters, c.listeners); err != nil {
			delete(h.common, id) // left out of this table; tried again at the next
			h.dir = nil
			return nil
		}
		stamp(c.clusters, t.Built())
		stamp(c.listeners, t.Built())
		h.common[id] = c
		return nil
	})
	for id := range h.views {
		if !seen[id] {
			delete(h.views, id)
		}
	}
	for id := range h.common {
		if !seen[id] {
			delete(h.common, id)
			rebuilt = true
		}
	}
	if !rebuilt {
		return changed // no service's definition changed: the maps stand
	}
	clusters, listeners := map[string]resource{}, map[string]resource{}
	for _, c := range h.common {
		maps.Copy(clusters, c.clusters)
		maps.Copy(listeners, c.listeners)
	}
	changed[clusterIdx] = diff(h.clusters, clusters)
	changed[listenerIdx] = diff(h.listeners, listeners)
	h.clusters, h.listeners = clusters, listeners
	return changed
}

// refreshPlace brings a place's view to table t (the hub's), reusing a
// service's assignments while its definition and members are unchanged,
// and returns the names of its assignments that changed (to wake their
// watchers served from it).
func (h *hub) refreshPlace(t *status.Table, ps *placeState) (map[string]bool, error) {
	loc := t.LocalityOf(ps.place.region, ps.place.zone)
	if loc != ps.loc {
		// The place's names got ids (its zone's first instance came) or
		// new ones: every tier, so every assignment, may differ.
		clear(ps.assign)
		ps.loc = loc
	}
	seen := map[uint32]bool{}
	rebuilt := ps.view == nil
	var err error
	_ = services(t, func(id uint32, svc status.ServiceInfo) error {
		seen[id] = true
		fp := h.fps[id]
		a, ok := ps.assign[id]
		if !ok || a.fp != fp {
			rebuilt = true
			old := a.res
			a = svcAssign{fp: fp, res: map[string]resource{}}
			for _, port := range svc.Ports {
				cla, d := buildAssignment(t, id, svc, port.Name, loc)
				a.dropped += d
				if err = put(a.res, svc, cla.ClusterName, cla); err != nil {
					return err
				}
				r := a.res[cla.ClusterName]
				r.changed, r.rev, r.rotation = t.Built(), t.StoreRevision(), rotationOf(cla)
				if prev, ok := old[cla.ClusterName]; ok {
					if prev.version == r.version {
						r.changed, r.rev = prev.changed, prev.rev // unchanged: still the old change
					}
					r.withdraws = !subset(prev.rotation, r.rotation)
				}
				a.res[cla.ClusterName] = r
			}
			if err = h.putView(a.res, t, id, fp); err != nil {
				return err
			}
			ps.assign[id] = a
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for id := range ps.assign {
		if !seen[id] {
			delete(ps.assign, id)
			rebuilt = true
		}
	}
	var changed map[string]bool
	var eds map[string]resource
	dropped := 0
	if rebuilt {
		// Sized as the last view's: grown from empty, a map of every
		// assignment is rehashed several times at each table.
		n := 0
		if ps.view != nil {
			n = len(ps.view.res[endpointIdx])
		}
		eds = make(map[string]resource, n)
		for _, a := range ps.assign {
			dropped += a.dropped
			maps.Copy(eds, a.res)
		}
		if ps.view != nil {
			changed = diff(ps.view.res[endpointIdx], eds)
		}
	} else {
		// No service's assignment changed for this place: the map stands.
		eds, dropped = ps.view.res[endpointIdx], ps.dropped
	}
	v := &view{table: t.Version(), rev: t.StoreRevision(), built: t.Built()}
	v.res[clusterIdx], v.res[listenerIdx], v.res[endpointIdx], v.res[routeIdx] = h.clusters, h.listeners, eds, map[string]resource{}
	ps.view, ps.dropped = v, dropped
	h.m.dropped.Set(float64(dropped))
	return changed, nil
}

// putView files the agent's view of service id ("<svc>.<ns>", package
// agentview) in m; fp is the service's membersFP. The view is stamped with the store revision of the
// table its content last changed in: while the content is the one old
// holds, so is the resource (the same revision, version and change), so
// that a view's revision orders views across servers — a server behind
// stamps an older content with a lower revision — without changing the
// version at every store write.
func (h *hub) putView(m map[string]resource, t *status.Table, id uint32, fp uint64) error {
	prev, had := h.views[id]
	if had && prev.fp == fp {
		m[prev.name] = prev.res
		return nil
	}
	v, err := agentview.Of(t, id)
	if err != nil {
		return err
	}
	// The view's digest is of its content without the revision stamped
	// in it: the same members from a server that stamped them at another
	// revision are the same view, not sent again. Encoded once, digested
	// unstamped, then stamped for the body.
	cla := v.Encode()
	content, err := Digest(cla)
	if err != nil {
		return err
	}
	name := agentview.Name(v.Service.Namespace, v.Service.Name)
	had = had && prev.name == name
	if had && prev.res.version == content {
		h.views[id] = svcView{fp: fp, name: name, res: prev.res}
		m[name] = prev.res
		return nil
	}
	agentview.Stamp(cla, t.StoreRevision())
	body, err := anypb.New(cla)
	if err != nil {
		return fmt.Errorf("xdsserver: encoding the view of %s: %w", name, err)
	}
	r := resource{version: content, body: body, ns: v.Service.Namespace, svc: v.Service.Name}
	r.changed, r.rev, r.rotation = t.Built(), t.StoreRevision(), v.InRotation()
	r.withdraws = had && !subset(prev.res.rotation, r.rotation)
	m[name] = r
	h.views[id] = svcView{fp: fp, name: name, res: r}
	return nil
}

// svcView is one service's agent view, kept while its members are
// unchanged (fp is membersFP's).
type svcView struct {
	fp   uint64
	name string
	res  resource
}
