package xdsserver_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzDeltaStream sends a sequence of delta requests decoded from the
// input on one stream to a real server (fuzzhub_test.go) — subscriptions
// and unsubscriptions of real and junk names, of served types and
// others, initial versions, nonces, refusals, nodes — with table changes
// between them, and checks every response: of a type the stream asked
// for, a fresh nonce, a revision that never goes back, resources that
// decode, carry their names and were subscribed to (or under the
// wildcard) and readable by the token, removals only of names subscribed
// to or held; every name newly subscribed to, and every type's first
// request, answered; and the stream ending only as it should.
func FuzzDeltaStream(f *testing.F) {
	f.Add([]byte{})
	// Admin token; a cluster wildcard; endpoints of pay and a junk name;
	// acknowledge; a table change; unsubscribe; refuse.
	f.Add([]byte{1, 0, 0, 0, 1, 1, 3, 0, 8, 5, 0, 0, 6, 7, 1, 1, 4, 0, 5, 1})
	// Shop reader; first request without a node, then one with a node.
	f.Add([]byte{0, 1, 1, 1, 0, 1, 2, 16, 2, 0, 2})
	// Initial versions on a reconnection, with a version from the future.
	f.Add([]byte{1, 0, 0, 9, 0, 5})
	h := newFuzzHub(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		h.next(t)
		if err := runDelta(t, h, &fuzzInput{b: data}, false); err != nil {
			t.Fatal(err)
		}
		if err := h.after(); err != nil {
			t.Fatal(err)
		}
	})
}

// deltaType is what a delta stream asked for of one type, as the client
// knows it.
type deltaType struct {
	open  bool
	wild  bool
	names map[string]bool
	// known is every name the server may think the client holds: sent
	// to it, or declared in initial_resource_versions (declared).
	known, declared map[string]bool
}

func (d deltaType) clone() deltaType {
	d.names = maps.Clone(d.names)
	return d
}

// deltaRun is what one input's client knows of its stream.
type deltaRun struct {
	shopOnly bool
	subs     [4]deltaType
	// prev is the subscription of type prevType before the request in
	// flight: until its barrier is answered, a response may come from
	// either (prevType -1: none in flight).
	prev     deltaType
	prevType int
	// must lists the names of type mustType the request in flight must
	// have answered by its barrier's answer; mustAny that it must be
	// answered at all (the type's first request).
	must     map[string]bool
	mustType int
	mustAny  bool
	answered bool
	nonces   map[string]bool
	rev      uint64
	got      []*discoveryv3.DeltaDiscoveryResponse
}

func deltaTypeIndex(url string) int {
	return slices.Index([]string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}, url)
}

// runDelta runs one input on a delta stream: with raw, its requests are
// frames of protobuf, sent as they are (a frame that does not decode is
// sent too, and must end the stream with a status that says so).
func runDelta(t *testing.T, h *fuzzHub, in *fuzzInput, raw bool) error {
	cs, cancel, valid, shopOnly, err := h.fuzzStream(in, "DeltaAggregatedResources")
	if err != nil {
		return err
	}
	recv, done := receive(recvAs[discoveryv3.DeltaDiscoveryResponse](cs))
	defer func() { cancel(); drain(recv) }()
	d := &deltaRun{shopOnly: shopOnly, prevType: -1, nonces: map[string]bool{}}
	for i := range d.subs {
		d.subs[i] = deltaType{names: map[string]bool{}, known: map[string]bool{}, declared: map[string]bool{}}
	}
	for n := 0; in.more() && n < 32; n++ {
		var msg any
		req := &discoveryv3.DeltaDiscoveryRequest{}
		if raw {
			f := in.frame()
			if proto.Unmarshal(f, req) != nil {
				return garbage(cs, f, recv, done, valid)
			}
			msg = rawFrame(f)
		} else if req = d.next(t, h, in); req == nil {
			continue
		} else {
			msg = req
		}
		d.apply(req)
		// The barrier replaces the one before, so that barriers do not
		// add up to the cap on names.
		barrier := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.RouteType, ResourceNamesSubscribe: []string{barrierName(n)},
			ResourceNamesUnsubscribe: []string{barrierName(n - 1)}}
		d.apply(barrier)
		if cs.SendMsg(msg) != nil || cs.SendMsg(barrier) != nil {
			return ending(<-done, valid) // the server ended the stream: its status says why
		}
		ended, err := d.await(barrierName(n), recv, done, valid)
		if ended || err != nil {
			return err
		}
	}
	return closing(cs.CloseSend, recv, done, valid, d.check)
}

// next decodes the next request from in, or makes a table change and
// returns nil.
func (d *deltaRun) next(t *testing.T, h *fuzzHub, in *fuzzInput) *discoveryv3.DeltaDiscoveryRequest {
	switch op := in.byte() % 8; {
	case op == 5 && len(d.got) > 0: // acknowledge or refuse one of the last responses
		r := d.got[len(d.got)-1-in.pick(min(len(d.got), 4))]
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}
		if in.byte()&1 == 1 {
			req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: "refused by the fuzzer"}
		}
		return req
	case op == 6:
		h.publish(t, in.byte())
		return nil
	}
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: fuzzTypes[in.pick(len(fuzzTypes))]}
	flags := in.byte()
	for range flags & 3 {
		req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, fuzzNames[in.pick(len(fuzzNames))])
	}
	if flags&4 != 0 {
		for range 1 + in.pick(2) {
			req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, fuzzNames[in.pick(len(fuzzNames))])
		}
	}
	if flags&8 != 0 {
		req.InitialResourceVersions = map[string]string{}
		for range 1 + in.pick(2) {
			v := fuzzVersions[in.pick(len(fuzzVersions))]
			if c := in.byte(); c&1 == 1 && len(d.got) > 0 {
				if rs := d.got[int(c>>1)%len(d.got)].Resources; len(rs) > 0 {
					v = rs[0].Version // a version the server sent
				}
			}
			req.InitialResourceVersions[fuzzNames[in.pick(len(fuzzNames))]] = v
		}
	}
	if flags&16 != 0 {
		req.Node = fuzzNodes[in.pick(len(fuzzNodes))]
	}
	if flags&32 != 0 {
		req.ResponseNonce = []string{"junk", "0", "1", "18446744073709551616"}[in.pick(4)]
		if len(d.got) > 0 && in.byte()&1 == 1 {
			req.ResponseNonce = d.got[len(d.got)-1].Nonce
		}
	}
	if flags&64 != 0 {
		req.ErrorDetail = &rpcstatus.Status{Code: int32(in.byte()), Message: "refused by the fuzzer"}
	}
	return req
}

// apply takes a request into what the client knows it asked for, as the
// protocol has the server take it.
func (d *deltaRun) apply(req *discoveryv3.DeltaDiscoveryRequest) {
	i := deltaTypeIndex(req.TypeUrl)
	if !isBarrier(req) {
		d.must, d.mustType, d.mustAny, d.answered = map[string]bool{}, i, false, false
	}
	if i < 0 {
		return // not served: ignored
	}
	s := &d.subs[i]
	if !isBarrier(req) {
		d.prev, d.prevType, d.mustAny = s.clone(), i, !s.open
	}
	first := !s.open
	if first {
		s.open = true
		for n := range req.InitialResourceVersions {
			s.known[n], s.declared[n] = true, true
		}
		if (i == 0 || i == 2) && len(req.ResourceNamesSubscribe) == 0 {
			s.wild = true // the legacy wildcard
		}
	}
	for _, n := range req.ResourceNamesSubscribe {
		if n == "*" {
			s.wild = true
			continue
		}
		s.names[n] = true
		if !s.declared[n] && !slices.Contains(req.ResourceNamesUnsubscribe, n) && !isBarrier(req) {
			d.must[n] = true
		}
	}
	for _, n := range req.ResourceNamesUnsubscribe {
		if n == "*" {
			s.wild = false
			continue
		}
		delete(s.names, n)
	}
}

func isBarrier(req *discoveryv3.DeltaDiscoveryRequest) bool {
	return len(req.ResourceNamesSubscribe) == 1 && strings.HasPrefix(req.ResourceNamesSubscribe[0], "cairn-fuzz-barrier-")
}

// await checks responses until the barrier's answer; ended says the
// stream ended (as it may, or err).
func (d *deltaRun) await(barrier string, recv <-chan *discoveryv3.DeltaDiscoveryResponse, done <-chan error, valid bool) (bool, error) {
	deadline := time.After(fuzzWait)
	for {
		select {
		case r, ok := <-recv:
			if !ok {
				recv = nil // done says how it ended
				continue
			}
			if err := d.check(r); err != nil {
				return true, err
			}
			if r.TypeUrl == resourcev3.RouteType && slices.Contains(r.RemovedResources, barrier) {
				if d.mustAny && !d.answered {
					return true, fmt.Errorf("the first request of %s was not answered", d.prevTypeURL())
				}
				if len(d.must) > 0 {
					return true, fmt.Errorf("names subscribed to and not answered: %v of %s", slices.Sorted(maps.Keys(d.must)), d.prevTypeURL())
				}
				d.prevType = -1
				return false, nil
			}
		case err := <-done:
			return true, ending(err, valid)
		case <-deadline:
			return true, fmt.Errorf("no answer to %s within %v", barrier, fuzzWait)
		}
	}
}

func (d *deltaRun) prevTypeURL() string {
	return []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}[d.mustType]
}

// check checks one response against what the stream asked for.
func (d *deltaRun) check(r *discoveryv3.DeltaDiscoveryResponse) error {
	i := deltaTypeIndex(r.TypeUrl)
	if i < 0 || !d.subs[i].open {
		return fmt.Errorf("a response of type %q, which the stream did not ask for", r.TypeUrl)
	}
	if r.Nonce == "" || d.nonces[r.Nonce] {
		return fmt.Errorf("a response with nonce %q (empty or sent before)", r.Nonce)
	}
	d.nonces[r.Nonce] = true
	rev, err := strconv.ParseUint(r.SystemVersionInfo, 10, 64)
	if err != nil || rev < d.rev {
		return fmt.Errorf("system_version_info %q after revision %d: not a revision, or an older one", r.SystemVersionInfo, d.rev)
	}
	d.rev = rev
	s, p := &d.subs[i], d.prev
	inFlight := d.prevType == i
	seen := map[string]bool{}
	for _, res := range r.Resources {
		name, err := resourceName(r.TypeUrl, res.Resource)
		switch {
		case err != nil:
			return fmt.Errorf("resource %q: %v", res.Name, err)
		case name != res.Name:
			return fmt.Errorf("resource %q carries %q", res.Name, name)
		case res.Version == "":
			return fmt.Errorf("resource %q without a version", res.Name)
		case seen[name]:
			return fmt.Errorf("resource %q twice in one response", name)
		case !s.wild && !s.names[name] && !(inFlight && (p.wild || p.names[name])):
			return fmt.Errorf("resource %q of %s, which the stream did not subscribe to (names %v, wildcard %v)", name, r.TypeUrl, slices.Sorted(maps.Keys(s.names)), s.wild)
		case d.shopOnly && namespaceOf(name) != "shop":
			return fmt.Errorf("resource %q sent to a token that may read only namespace shop", name)
		}
		seen[name], s.known[name] = true, true
		if i == d.mustType {
			delete(d.must, name)
		}
	}
	for _, name := range r.RemovedResources {
		switch {
		case seen[name]:
			return fmt.Errorf("%q both sent and removed (or removed twice) in one response", name)
		case !s.names[name] && !s.known[name] && !(inFlight && p.names[name]) && !strings.HasPrefix(name, "cairn-fuzz-barrier-"):
			return fmt.Errorf("removal of %q of %s, which the stream neither subscribed to nor held", name, r.TypeUrl)
		}
		seen[name] = true
		if i == d.mustType {
			delete(d.must, name)
		}
	}
	if i == d.mustType {
		d.answered = true
	}
	d.got = append(d.got, r)
	return nil
}
