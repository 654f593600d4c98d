package xdsserver

import (
	"maps"
	"slices"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// subscription is what one stream asked for of one resource type, and
// what it was last sent.
type subscription struct {
	open     bool // a request of this type has been seen
	wildcard bool
	names    map[string]bool
	// sent is the version of the last response (before the first, the
	// version the subscriber said it holds), nonce its nonce; refused
	// the last version the subscriber NACKed, never sent again unless
	// the subscription changes.
	sent, nonce, refused string
	// later says a response is owed (send's force) once the view is no
	// older than what the subscriber holds.
	later bool
	// origin and withdraw time and classify the last response, observed
	// when it is acknowledged; acked is the newest change the subscriber
	// acknowledged, so that the next response is timed from what is new.
	origin, newest, acked time.Time
	withdraw              bool
	// sentView and sentNames are what the last response carried, for
	// the ack book once it is acknowledged.
	sentView  *view
	sentNames []string
}

// sotwStream is one state-of-the-world ADS stream: requests in order,
// and a response per type whenever what the type's subscription covers
// changes in the published table.
type sotwStream struct {
	peer
	stream grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	subs   [numTypes]subscription
}

// StreamAggregatedResources serves one state-of-the-world ADS stream.
func (s *Server) StreamAggregatedResources(stream grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]) error {
	st := &sotwStream{peer: newPeer(s), stream: stream}
	return serve(s, stream.Context(), &st.peer, stream.Recv,
		func(r *discoveryv3.DiscoveryRequest) bool { return r.VersionInfo != "" }, st.request, st.tableChanged)
}

// request handles one request: an acknowledgement, a refusal, or a
// change of what the stream subscribes to.
func (st *sotwStream) request(req *discoveryv3.DiscoveryRequest) error {
	i, ok, err := st.begin(req.Node, req.TypeUrl)
	if !ok || err != nil {
		return err
	}
	sub := &st.subs[i]
	if sub.nonce != "" && req.ResponseNonce != sub.nonce {
		// A request that answers an older response: the stream has moved
		// on, and its state will be acknowledged or refused with the
		// newer nonce (state of the world ignores stale nonces).
		return nil
	}
	if req.ErrorDetail == nil && req.ResponseNonce != "" && i == endpointIdx && sub.sentView != nil {
		st.book.replace(sub.sentView, sub.sentNames)
	}
	if req.ErrorDetail == nil && req.ResponseNonce != "" && !sub.origin.IsZero() {
		st.s.observeDelivery(sub.origin, sub.withdraw)
		sub.origin, sub.withdraw, sub.acked = time.Time{}, false, sub.newest
	}
	if req.ErrorDetail != nil && req.ResponseNonce != "" {
		// A NACK. The subscriber keeps its last good version; sending the
		// same version again would be refused again, in a loop: it is
		// sent again only if the subscription changes.
		sub.refused = sub.sent
		st.s.m.nacks.WithLabelValues(typeLabel[i]).Inc()
		st.s.log.Warn("xDS subscriber refused a response", "node", st.node.GetId(), "type", typeLabel[i],
			"version", sub.sent, "error", req.ErrorDetail.GetMessage())
	}
	first := !sub.open
	if first {
		// Changes made before the subscription are not its deliveries.
		sub.acked, sub.newest = st.s.cfg.Now(), st.s.cfg.Now()
		// A reconnecting subscriber names the version it holds: nothing
		// older than it is sent (send).
		sub.sent = req.VersionInfo
	}
	was := sub.names
	changed := sub.update(i, req.ResourceNames, first)
	sub.open = true
	if first || changed {
		var n [numTypes]int
		for j := range numTypes {
			n[j] = len(st.subs[j].names)
		}
		if err := st.namesFit(i, len(sub.names), n); err != nil {
			return err
		}
		add, remove := namesDiff(was, sub.names)
		st.s.hub.watch(st.mem, i, sub.wildcard, add, remove)
		if i == endpointIdx {
			st.book.watch(slices.Sorted(maps.Keys(sub.names)))
		}
		// The first request of a type is always answered, whatever
		// version it names (a client reconnecting at a version may not
		// hold it, field notes X5), and so is a change of names, even
		// when no content changed (X2).
		return st.send(i, true)
	}
	return nil
}

// namesDiff returns the names of now that were not in was, and those of
// was no longer in now.
func namesDiff(was, now map[string]bool) (add, remove []string) {
	for n := range now {
		if !was[n] {
			add = append(add, n)
		}
	}
	for n := range was {
		if !now[n] {
			remove = append(remove, n)
		}
	}
	return add, remove
}

// update sets the subscription's names from a request and reports
// whether they changed. In state of the world every request carries the
// whole set. For listeners and clusters an empty first request, or "*",
// asks for everything (the legacy and the explicit wildcard); for the
// other types an empty set asks for nothing.
func (sub *subscription) update(i int, names []string, first bool) bool {
	wild := false
	set := make(map[string]bool, len(names))
	for _, n := range names {
		if n == wildcardName {
			wild = true
			continue
		}
		set[n] = true
	}
	if (i == listenerIdx || i == clusterIdx) && len(names) == 0 && (first || sub.wildcard) {
		wild = true
	}
	changed := wild != sub.wildcard || len(set) != len(sub.names)
	if !changed {
		for n := range set {
			if !sub.names[n] {
				changed = true
				break
			}
		}
	}
	sub.wildcard, sub.names = wild, set
	return changed
}

// fills reports whether sending names of v brings the client an
// assignment it did not have (a new cluster's, which it may be waiting
// for), or the first endpoints in rotation to one that had none: either
// goes at once.
func (st *sotwStream) fills(sub *subscription, v *view, names []string) bool {
	for _, n := range names {
		if _, had := slices.BinarySearch(sub.sentNames, n); !had {
			return true
		}
		if len(sub.sentView.res[endpointIdx][n].rotation) == 0 && len(v.res[endpointIdx][n].rotation) > 0 {
			return true
		}
	}
	return false
}

// withdrawsFrom reports whether replacing the assignments prevNames of
// prev by names of v takes an endpoint out of rotation: an assignment
// gone, or one that lost an endpoint in rotation.
func (st *sotwStream) withdrawsFrom(prev *view, prevNames []string, v *view, names []string) bool {
	for _, n := range prevNames {
		r, ok := v.res[endpointIdx][n]
		if _, in := slices.BinarySearch(names, n); !ok || !in { // names are sorted
			return true
		}
		if !subset(prev.res[endpointIdx][n].rotation, r.rotation) {
			return true
		}
	}
	return false
}

// tableChanged sends, in make-before-break order, a response for every
// open subscription whose content changed.
func (st *sotwStream) tableChanged() error {
	for i := range numTypes {
		if st.subs[i].open {
			if err := st.send(i, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// send answers the subscription of type i from the current table: with
// force, always; otherwise only when its digest differs from the one
// last sent and from the one last refused.
//
// Nothing goes from a view older than what the subscriber holds (the
// store revision of the version it last got, or named on its first
// request) with other content: the response, forced or not, waits until
// a view passes that revision (holds). Nor does anything go from a view
// older than one the stream already sent from (peer.older).
func (st *sotwStream) send(i int, force bool) error {
	v := st.view()
	if v == nil {
		return nil // not joined: nothing asked for yet
	}
	sub := &st.subs[i]
	res, names, digest := v.pick(i, sub.wildcard, sub.names, st.allow)
	hold, rev := holds(sub.sent, v.rev, digest, true)
	if hold || st.older(v.rev) {
		if hold {
			st.waitRev(rev)
		}
		sub.later = sub.later || force
		return nil
	}
	force, sub.later = force || sub.later, false
	sentRev, sentDigest := ParseVersion(sub.sent)
	_, refusedDigest := ParseVersion(sub.refused)
	if !force && (digest == sentDigest || sub.refused != "" && digest == refusedDigest) {
		if i == endpointIdx {
			st.caughtUp()
		}
		return nil
	}
	version := FormatVersion(v.rev, digest)
	if digest == sentDigest && sentRev > v.rev {
		version = sub.sent // the content the subscriber holds, as it names it
	}
	// Assignments travel in two lanes (see deltaStream.send): a response
	// that takes an endpoint out of rotation for this client goes at
	// once, carrying whatever else changed; one that only adds endpoints
	// or changes weights may be held back.
	withdrawal, laned := true, false
	if i == endpointIdx && !force && sub.sentView != nil {
		withdrawal = st.withdrawsFrom(sub.sentView, sub.sentNames, v, names)
		if laned = !withdrawal && !st.fills(sub, v, names); laned && !st.admitNow(st.s.cfg.Now()) {
			return nil
		}
	}
	nonce := st.nextNonce()
	err := st.stream.Send(&discoveryv3.DiscoveryResponse{
		VersionInfo: version,
		Resources:   res,
		TypeUrl:     typeURLs[i],
		Nonce:       nonce,
	})
	if err != nil {
		return err
	}
	st.sentRev = max(st.sentRev, v.rev)
	prevView, prevNames := sub.sentView, sub.sentNames
	sub.sent, sub.nonce, sub.sentView, sub.sentNames = version, nonce, v, names
	switch {
	case laned:
		st.admitted(st.s.cfg.Now())
	case i == endpointIdx:
		st.caughtUp() // a response carries every change: nothing is held back
	}
	// Timed from the oldest change the subscriber has not acknowledged
	// yet, a response it never acknowledged (superseded by this one)
	// included; a withdrawal among them puts the response in that lane.
	if i == endpointIdx && prevView != nil {
		sub.withdraw = sub.withdraw || withdrawal && st.withdrawsFrom(prevView, prevNames, v, names)
	}
	for _, n := range names {
		r := v.res[i][n]
		if r.changed.After(sub.newest) {
			sub.newest = r.changed
		}
		if r.changed.After(sub.acked) {
			if sub.origin.IsZero() || r.changed.Before(sub.origin) {
				sub.origin = r.changed
			}
			if i != endpointIdx {
				sub.withdraw = sub.withdraw || r.withdraws
			}
		}
	}
	st.s.m.responses.WithLabelValues(typeLabel[i]).Inc()
	return nil
}
