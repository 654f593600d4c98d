package xdsserver

import (
	"maps"
	"slices"
	"strconv"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// maxPending bounds the responses of one type a delta stream remembers
// until they are acknowledged or refused: a client answers each in turn,
// so more than a few unanswered means it answers none, and the oldest
// is forgotten (its refusal then cannot be told apart from the rest).
const maxPending = 16

// change is what one response did to one resource: the version the
// client held before (absent: none) and the version sent ("" for a
// removal).
type change struct {
	prev    string
	prevRot []string
	hadPrev bool
	sent    string
	res     resource // what was sent
}

// deltaSub is what one delta stream asked for of one resource type, and
// what the client holds.
type deltaSub struct {
	open     bool
	wildcard bool
	names    map[string]bool   // explicit subscriptions
	sorted   []string          // names, sorted; nil when to be sorted again
	has      map[string]string // what the client holds, by name: its version
	// rot is the endpoints in rotation of what the client holds, by
	// name, to tell a withdrawal from an admission; absent when unknown
	// (a version the client held when it reconnected).
	rot     map[string][]string
	refused map[string]string // versions the client refused, by name: never sent again
	// later is the names to answer (as in send's force) once the view is
	// no older than what the stream was sent (peer.older). holding says
	// the last pass held something back: the pass that holds nothing
	// back answers even when nothing changed, so that the client learns
	// (system_version_info) that the server has caught up with it.
	later   map[string]bool
	holding bool
	// retry is the names a pass held back (an admission coalesced or
	// shed, or a view older than what the client holds): a pass that
	// looks only at what changed (woken) looks at them too.
	retry map[string]bool
	again bool // the next pass looks at every name (a frozen pass was to)
	// pending is the responses awaiting an answer, oldest first: a few
	// at most (maxPending), and most often one or none. A slice, not a
	// map by nonce: a map keeps the room of its largest size, some
	// 650 bytes a stream for the one response a client answers at once.
	pending []pendingResp
	since   time.Time // when the subscription opened: earlier changes are not its deliveries
}

// mark sets name in the set *m, made at its first name: most streams
// never hold anything back or refuse anything, and an empty map made
// up front costs each of them its header.
func mark(m *map[string]bool, name string) {
	if *m == nil {
		*m = map[string]bool{}
	}
	(*m)[name] = true
}

// pendingResp is a response awaiting its acknowledgement: what it
// changed, when the oldest change it carries was made, and its lane.
type pendingResp struct {
	nonce    string
	changes  map[string]change
	since    time.Time // the subscription's start: older changes are not timed
	origin   time.Time
	withdraw bool
}

// deltaStream is one incremental ADS stream: each response carries only
// the resources that changed for the client and the names it must drop.
type deltaStream struct {
	peer
	stream grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
	// subs is made per type at its first request: a gRPC client asks for
	// one or two types of four, and each costs some 180 bytes.
	subs [numTypes]*deltaSub
}

// DeltaAggregatedResources serves one incremental ADS stream.
func (s *Server) DeltaAggregatedResources(stream grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]) error {
	st := &deltaStream{peer: newPeer(s), stream: stream}
	st.tracks = true
	return serve(s, stream.Context(), &st.peer, stream.Recv,
		func(r *discoveryv3.DeltaDiscoveryRequest) bool { return len(r.InitialResourceVersions) > 0 }, st.request, st.tableChanged)
}

// request handles one request: a change of subscriptions, an
// acknowledgement or a refusal. Unlike state of the world, a delta
// request with an old nonce still changes the subscriptions (the
// protocol forbids rejecting it for that).
func (st *deltaStream) request(req *discoveryv3.DeltaDiscoveryRequest) error {
	i, ok, err := st.begin(req.Node, req.TypeUrl)
	if !ok || err != nil {
		return err
	}
	if st.subs[i] == nil {
		st.subs[i] = &deltaSub{}
	}
	sub := st.subs[i]
	if n := req.ResponseNonce; n != "" {
		if k := slices.IndexFunc(sub.pending, func(pr pendingResp) bool { return pr.nonce == n }); k >= 0 {
			pr := sub.pending[k]
			sub.pending = slices.Delete(sub.pending, k, k+1)
			if req.ErrorDetail == nil {
				if i == endpointIdx {
					for name, c := range pr.changes {
						if c.sent != "" {
							st.book.set(name, c.res)
						} else {
							st.book.drop(name)
						}
					}
				}
				st.s.observeDelivery(pr.origin, pr.withdraw)
			} else {
				ch := pr.changes
				sub.refuse(ch)
				// What was refused is looked at again by the next pass: a
				// refused version is not sent again (sub.refused), but a
				// refused removal is, or nothing would ever send it.
				for name := range ch {
					mark(&sub.retry, name)
				}
				st.s.m.nacks.WithLabelValues(typeLabel[i]).Inc()
				st.s.log.Warn("xDS subscriber refused a response", "node", st.node.GetId(), "type", typeLabel[i],
					"resources", len(ch), "error", req.ErrorDetail.GetMessage())
			}
		}
	}
	first := !sub.open
	if first {
		sub.open, sub.since = true, st.s.cfg.Now()
		// refused, later and retry are made at their first name.
		sub.names, sub.has, sub.rot = map[string]bool{}, map[string]string{}, map[string][]string{}
		// A reconnecting client says what it holds: what has not changed
		// since is not sent again, what is gone is removed — unless the
		// view is older than what it holds (send).
		maps.Copy(sub.has, req.InitialResourceVersions)
		if (i == listenerIdx || i == clusterIdx) && len(req.ResourceNamesSubscribe) == 0 {
			sub.wildcard = true // the legacy wildcard: a first request naming nothing
		}
	}
	// Every name subscribed to is answered, even when the client already
	// holds its version (the protocol's rule; field notes X2), except on
	// a reconnection, where initial_resource_versions is the point.
	force := map[string]bool{}
	if len(req.ResourceNamesSubscribe) > 0 || len(req.ResourceNamesUnsubscribe) > 0 {
		sub.sorted = nil
	}
	for _, n := range req.ResourceNamesSubscribe {
		if n == wildcardName {
			sub.wildcard = true
			continue
		}
		sub.names[n] = true
		if _, held := req.InitialResourceVersions[n]; !first || !held {
			force[n] = true
		}
	}
	for _, n := range req.ResourceNamesUnsubscribe {
		if n == wildcardName {
			sub.wildcard = false
			continue
		}
		delete(sub.names, n)
		delete(sub.has, n) // so that a later subscription sends it again
		delete(sub.rot, n)
		delete(sub.later, n)
		delete(sub.retry, n)
		if i == endpointIdx {
			st.book.drop(n)
		}
	}
	if first || len(req.ResourceNamesSubscribe) > 0 || len(req.ResourceNamesUnsubscribe) > 0 {
		if err := st.namesFit(i, len(sub.names), st.nameCounts()); err != nil {
			return err
		}
		st.s.hub.watch(st.mem, i, sub.wildcard, req.ResourceNamesSubscribe, req.ResourceNamesUnsubscribe)
		if i == endpointIdx {
			sub.sorted = slices.Sorted(maps.Keys(sub.names))
			st.book.watch(sub.sorted)
		}
	}
	if first || len(force) > 0 {
		// The first request of a type is answered even when nothing is to
		// be sent: a client waits for it to finish starting.
		// A first request looks at every name; a later one at the names
		// it subscribed, those held back and what changed since the last
		// pass (take).
		w := st.s.hub.take(st.mem, i)
		w.all = w.all || first
		return st.send(i, force, first, w)
	}
	return nil
}

// nameCounts returns how many names the stream watches of each type.
func (st *deltaStream) nameCounts() (n [numTypes]int) {
	for i := range numTypes {
		if st.subs[i] != nil {
			n[i] = len(st.subs[i].names)
		}
	}
	return n
}

// refuse undoes a refused response's changes to what the client holds,
// and remembers the refused versions.
func (sub *deltaSub) refuse(ch map[string]change) {
	for name, c := range ch {
		if c.sent != "" {
			if sub.refused == nil {
				sub.refused = map[string]string{}
			}
			sub.refused[name] = c.sent
		}
		if c.hadPrev {
			sub.has[name] = c.prev
			if c.prevRot != nil {
				sub.rot[name] = c.prevRot
			} else {
				delete(sub.rot, name)
			}
		} else {
			delete(sub.has, name)
			delete(sub.rot, name)
		}
	}
}

// tableChanged sends, clusters first, the changes of every open
// subscription.
func (st *deltaStream) tableChanged() error {
	for i := range numTypes {
		if st.subs[i] != nil && st.subs[i].open {
			if err := st.send(i, nil, false, st.s.hub.take(st.mem, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// send sends what changed for the subscription of type i since the
// client's versions: every resource subscribed to (or, under the
// wildcard, every one) whose digest differs from the client's and from
// any version it refused, or is in force; and in removed_resources every
// name the client holds that no longer exists, and every name in force
// that does not exist (so the client need not wait out its timer). With
// always, a response goes out even when empty.
//
// Nothing goes from a view older than what the client holds: a resource
// it holds at a higher store revision than the view's, with other
// content or none, is neither sent nor removed, and the stream is woken
// when a view passes that revision (holds). Nor does anything go from a
// view older than one the stream already sent from (peer.older).
func (st *deltaStream) send(i int, force map[string]bool, always bool, w woken) error {
	v := st.view()
	if v == nil {
		return nil // not joined: nothing asked for yet
	}
	sub := st.subs[i] // made by request before any send
	frozen := st.older(v.rev)
	w.all = w.all || sub.again
	if frozen {
		for n := range force {
			mark(&sub.later, n)
		}
		// What the stream was woken for is looked at once it thaws.
		for n := range w.names {
			mark(&sub.retry, n)
		}
		sub.again = w.all
		sub.holding = true
		if !always {
			return nil
		}
		// The first answer goes all the same, empty, from the newest
		// revision sent.
		force, v = nil, &view{table: v.table, rev: st.sentRev, built: v.built}
	} else if len(sub.later) > 0 {
		force = maps.Clone(force)
		if force == nil {
			force = map[string]bool{}
		}
		for n := range sub.later {
			if sub.names[n] {
				force[n] = true
			}
		}
		clear(sub.later)
	}
	all := v.res[i]
	var names []string
	switch {
	case frozen:
	case sub.wildcard:
		consider := maps.Clone(sub.names)
		if consider == nil {
			consider = map[string]bool{}
		}
		for n := range all {
			consider[n] = true
		}
		for n := range sub.has {
			consider[n] = true
		}
		names = slices.Sorted(maps.Keys(consider))
	case w.all:
		// Named subscriptions change rarely and wake-ups often: their
		// sorted names are kept until they change.
		if sub.sorted == nil {
			sub.sorted = slices.Sorted(maps.Keys(sub.names))
		}
		names = sub.sorted
		clear(sub.retry) // every name is looked at: what is held back is found again
		sub.again = false
	default:
		names = w.of(sub, force)
	}
	// system_version_info is the store revision of the table the response
	// is built from: a removal carries no version, and an agent judges by
	// it whether a server's word that a view does not exist is older than
	// the view it holds.
	resp := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURLs[i], SystemVersionInfo: strconv.FormatUint(v.rev, 10)}
	var ch map[string]change // made at the first change: most wake-ups of a stream change nothing of one type
	pr := pendingResp{since: sub.since}
	// Assignments travel in two lanes: what takes an endpoint out of
	// rotation for this client goes at once; what only adds endpoints or
	// changes weights may be held back (coalesced, or shed under load),
	// and never holds a withdrawal up. Whether admissions may go is asked
	// once, when the first one comes.
	now := st.s.cfg.Now()
	lanes := i == endpointIdx
	asked, admit, admitting := false, false, false
	var wait uint64 // the lowest revision a resource is held back for
	for _, n := range names {
		prev, held := sub.has[n]
		r, exists := all[n]
		exists = exists && st.allow.allows(r)     // what the token may not see does not exist for it
		prevRev, prevDigest := ParseVersion(prev) // once a name a pass: this loop runs on every wake-up
		if held {
			if hold, rev := holdsParsed(prevRev, prevDigest, v.rev, r.version, exists); hold {
				if wait == 0 || rev < wait {
					wait = rev
				}
				mark(&sub.retry, n)
				continue
			}
		}
		delete(sub.retry, n)
		refused, ok := sub.refused[n]
		_, refusedDigest := ParseVersion(refused)
		switch {
		case exists && !force[n] && (held && prevDigest == r.version || ok && refusedDigest == r.version):
			continue
		case exists:
			rot, known := sub.rot[n]
			w := held && withdraws(rot, known, r)
			// A resource the client does not hold yet goes at once: it may
			// be waiting for it (a new cluster's assignment).
			if lanes && held && !urgent(rot, known, r) && !force[n] {
				if !asked {
					asked, admit = true, st.admitNow(now)
				}
				if !admit {
					mark(&sub.retry, n)
					continue
				}
				admitting = true
			}
			version := FormatVersion(v.rev, r.version)
			if held && prevDigest == r.version {
				version = prev // the content the client holds (sent again in force), as it names it
			}
			resp.Resources = append(resp.Resources, &discoveryv3.Resource{Name: n, Version: version, Resource: r.body})
			if ch == nil {
				ch = map[string]change{}
			}
			ch[n] = change{prev: prev, prevRot: rot, hadPrev: held, sent: version, res: r}
			sub.has[n], sub.rot[n] = version, r.rotation
			pr.note(r.changed, w)
		case held:
			resp.RemovedResources = append(resp.RemovedResources, n)
			if ch == nil {
				ch = map[string]change{}
			}
			ch[n] = change{prev: prev, prevRot: sub.rot[n], hadPrev: true}
			delete(sub.has, n)
			delete(sub.rot, n)
			pr.note(v.built, true) // a removal of what the client held withdraws it
		case force[n]:
			// A name subscribed to that does not exist: said at once, so that
			// the client need not wait out its timer. Nothing to undo if it
			// is refused, so nothing is kept for its acknowledgement (a
			// client naming thousands of names that never acknowledges would
			// have the server keep them for every response it left pending).
			resp.RemovedResources = append(resp.RemovedResources, n)
		}
	}
	switch {
	case admitting:
		st.admitted(now)
	case lanes && !asked:
		st.caughtUp()
	}
	if wait > 0 {
		st.waitRev(wait)
	}
	caught := sub.holding && wait == 0 && !frozen
	sub.holding = sub.holding && !caught || wait > 0
	if len(resp.Resources) == 0 && len(resp.RemovedResources) == 0 && !always && !caught {
		return nil
	}
	st.sentRev = max(st.sentRev, v.rev)
	pr.changes = ch
	resp.Nonce = st.nextNonce()
	pr.nonce = resp.Nonce
	if err := st.stream.Send(resp); err != nil {
		return err
	}
	if len(sub.pending) >= maxPending {
		sub.pending = slices.Delete(sub.pending, 0, 1)
	}
	sub.pending = append(sub.pending, pr)
	st.s.m.responses.WithLabelValues(typeLabel[i]).Inc()
	return nil
}

// woken is what a pass of send looks at: every name (all), or the names
// that changed since the last (names, from the hub: take), with those
// forced and those held back.
type woken struct {
	all   bool
	names map[string]struct{}
}

// of returns the names a pass looks at, sorted: those of w, forced or
// held back that the subscription names.
func (w woken) of(sub *deltaSub, force map[string]bool) []string {
	var out []string
	add := func(n string) {
		if sub.names[n] {
			out = append(out, n)
		}
	}
	for n := range w.names {
		add(n)
	}
	for n := range force {
		if _, dup := w.names[n]; !dup {
			add(n)
		}
	}
	for n := range sub.retry {
		_, dup := w.names[n]
		if !dup && !force[n] {
			add(n)
		}
	}
	slices.Sort(out)
	return out
}

// note takes one resource of the response into its origin (the oldest
// change it carries) and its lane.
func (pr *pendingResp) note(changed time.Time, withdraws bool) {
	if changed.Before(pr.since) {
		return
	}
	if pr.origin.IsZero() || changed.Before(pr.origin) {
		pr.origin = changed
	}
	pr.withdraw = pr.withdraw || withdraws
}
