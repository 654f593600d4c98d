package xdsserver_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-sd/cairn/xdsserver"
)

// FuzzSotWStream is FuzzDeltaStream over state of the world: requests of
// real and junk names and types, versions, current, stale and junk
// nonces, refusals and nodes, with table changes between them. Every
// response must be of a type the stream asked for, with a fresh nonce
// and a version, resources that decode and that the stream named at
// some point (or asked for under the wildcard) and that its token may
// read; the first request of a type must be answered unless it names a
// version from the future; the stream ends only as it should.
func FuzzSotWStream(f *testing.F) {
	f.Add([]byte{})
	// Admin token; clusters (wildcard), pay's assignment, acknowledge, a
	// table change, a refusal.
	f.Add([]byte{1, 0, 0, 0, 1, 1, 1, 0, 5, 1, 0, 6, 4, 5, 1, 1})
	// Shop reader: the bank's assignment and every listener.
	f.Add([]byte{0, 1, 1, 2, 4, 5, 1, 2, 0})
	h := newFuzzHub(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		h.next(t)
		if err := runSotW(t, h, &fuzzInput{b: data}, false); err != nil {
			t.Fatal(err)
		}
		if err := h.after(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzRequestBytes sends requests as the input's bytes, frames of
// protobuf that go to the server's decoder as they are, on a delta or a
// state-of-the-world stream, with the checks of FuzzDeltaStream and
// FuzzSotWStream: what the decoder makes of odd encodings (unknown
// fields, repeated and map entries, empty and huge values) reaches the
// handlers. A frame that does not decode must end the stream with a
// status that says so.
func FuzzRequestBytes(f *testing.F) {
	add := func(delta bool, reqs ...proto.Message) {
		b := []byte{0, 1} // delta, the admin's token
		if !delta {
			b[0] = 1
		}
		for _, r := range reqs {
			m, err := proto.Marshal(r)
			if err != nil || len(m) > 255 {
				f.Fatalf("seed %v: %d bytes, %v", r, len(m), err)
			}
			b = append(append(b, byte(len(m))), m...)
		}
		f.Add(b)
	}
	add(true, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType},
		&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc", "pay.shop"},
			InitialResourceVersions: map[string]string{"pay.shop": "5-x"}})
	add(false, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ListenerType, ResourceNames: []string{"pay.shop", "*"}},
		&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"pay.shop:grpc"}, VersionInfo: "1-x"})
	f.Add([]byte{0, 1, 3, 0xff, 0xff, 0xff}) // a frame that does not decode
	// A request, then a frame that does not decode, on a state-of-the-world
	// stream: grpc-go ends the stream before the handler returns, so the
	// stream's count drops after the client sees the end (h.after waits).
	f.Add([]byte("10DB\b00000000B\x010\"5type.googleapis.com/envoy.config.list"))
	h := newFuzzHub(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		h.next(t)
		in := &fuzzInput{b: data}
		run := runDelta
		if in.byte()&1 == 1 {
			run = runSotW
		}
		if err := run(t, h, in, true); err != nil {
			t.Fatal(err)
		}
		if err := h.after(); err != nil {
			t.Fatal(err)
		}
	})
}

// sotwType is what a state-of-the-world stream asked for of one type,
// at any point: every name, and whether ever the wildcard.
type sotwType struct {
	open  bool
	wild  bool
	names map[string]bool
	// last is the last response of the type received, asked its
	// request's names.
	last  *discoveryv3.DiscoveryResponse
	asked []string
	// curWild and cur are the subscription in force (what the last
	// request the server took asked for); future says the type's first
	// request named a version from a revision the server has not
	// reached, so that it answers nothing of the type (it waits).
	curWild bool
	cur     map[string]bool
	future  bool
}

// sotwRun is what one input's client knows of its stream.
type sotwRun struct {
	shopOnly bool
	subs     [4]sotwType
	// mustType is the type whose request is in flight and must be
	// answered by its barrier's answer (-1: none): a type's first
	// request, or one that changes the names subscribed to. The second is
	// known only while the input changed no table (published): a table
	// change sends responses the client may not have received when it
	// sends its next request, whose nonce is then stale (the server
	// ignores it).
	mustType  int
	published bool
	nonces    map[string]bool
	got       int // responses received
}

// runSotW runs one input on a state-of-the-world stream (raw: as
// runDelta).
func runSotW(t *testing.T, h *fuzzHub, in *fuzzInput, raw bool) error {
	cs, cancel, valid, shopOnly, err := h.fuzzStream(in, "StreamAggregatedResources")
	if err != nil {
		return err
	}
	recv, done := receive(recvAs[discoveryv3.DiscoveryResponse](cs))
	defer func() { cancel(); drain(recv) }()
	d := &sotwRun{shopOnly: shopOnly, mustType: -1, nonces: map[string]bool{}}
	for i := range d.subs {
		d.subs[i].names = map[string]bool{}
	}
	for n := 0; in.more() && n < 32; n++ {
		var msg any
		req := &discoveryv3.DiscoveryRequest{}
		if raw {
			f := in.frame()
			if proto.Unmarshal(f, req) != nil {
				return garbage(cs, f, recv, done, valid)
			}
			if req.TypeUrl == resourcev3.RouteType {
				continue // its answer could not be told from the barrier's
			}
			msg = rawFrame(f)
		} else if req = d.next(t, h, in); req == nil {
			continue
		} else {
			msg = req
		}
		d.apply(req)
		// The barrier: routes are never asked for by the inputs, so
		// that the next route response is its answer.
		rt := &d.subs[3]
		barrier := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.RouteType, ResourceNames: []string{barrierName(n)}}
		if rt.last != nil {
			barrier.ResponseNonce, barrier.VersionInfo = rt.last.Nonce, rt.last.VersionInfo
		}
		d.apply(barrier)
		if cs.SendMsg(msg) != nil || cs.SendMsg(barrier) != nil {
			return ending(<-done, valid)
		}
		ended, err := d.await(recv, done, valid)
		if ended || err != nil {
			return err
		}
	}
	return closing(cs.CloseSend, recv, done, valid, d.check)
}

// next decodes the next request from in, or makes a table change and
// returns nil. Routes are left to the barriers.
func (d *sotwRun) next(t *testing.T, h *fuzzHub, in *fuzzInput) *discoveryv3.DiscoveryRequest {
	switch op := in.byte() % 8; op {
	case 5: // acknowledge or refuse the last response of a type
		s := &d.subs[in.pick(3)]
		if s.last == nil {
			return nil
		}
		req := &discoveryv3.DiscoveryRequest{TypeUrl: s.last.TypeUrl, ResourceNames: s.asked, ResponseNonce: s.last.Nonce, VersionInfo: s.last.VersionInfo}
		if in.byte()&1 == 1 {
			req.VersionInfo, req.ErrorDetail = "", &rpcstatus.Status{Code: 3, Message: "refused by the fuzzer"}
		}
		return req
	case 6:
		h.publish(t, in.byte())
		d.published = true
		return nil
	}
	url := fuzzTypes[in.pick(len(fuzzTypes))]
	if url == resourcev3.RouteType {
		url = resourcev3.EndpointType
	}
	req := &discoveryv3.DiscoveryRequest{TypeUrl: url}
	flags := in.byte()
	for range flags & 3 {
		req.ResourceNames = append(req.ResourceNames, fuzzNames[in.pick(len(fuzzNames))])
	}
	var s *sotwType
	if i := deltaTypeIndex(url); i >= 0 {
		s = &d.subs[i]
	}
	if flags&4 != 0 && s != nil {
		req.ResourceNames = append(req.ResourceNames, s.asked...)
	}
	if s != nil && s.last != nil {
		req.ResponseNonce, req.VersionInfo = s.last.Nonce, s.last.VersionInfo
	}
	if flags&8 != 0 {
		req.VersionInfo = fuzzVersions[in.pick(len(fuzzVersions))]
	}
	if flags&16 != 0 {
		req.Node = fuzzNodes[in.pick(len(fuzzNodes))]
	}
	if flags&32 != 0 {
		req.ResponseNonce = []string{"", "junk", "0", "1"}[in.pick(4)]
	}
	if flags&64 != 0 {
		req.ErrorDetail = &rpcstatus.Status{Code: int32(in.byte()), Message: "refused by the fuzzer"}
	}
	return req
}

// apply takes a request into what the client knows it asked for.
func (d *sotwRun) apply(req *discoveryv3.DiscoveryRequest) {
	i := deltaTypeIndex(req.TypeUrl)
	if i < 0 {
		return
	}
	s := &d.subs[i]
	first := !s.open
	if first {
		// A first request is always answered, unless it names a version
		// from a revision the server has not reached (it waits for it).
		rev, _ := xdsserver.ParseVersion(req.VersionInfo)
		s.future = rev >= 1_000_000
	}
	serverNonce := ""
	if s.last != nil {
		serverNonce = s.last.Nonce
	}
	if taken := serverNonce == "" || req.ResponseNonce == serverNonce; taken && !d.published && i != 3 {
		// The server takes the request (its nonce is the last response's):
		// a change of names is answered, as the first request is.
		wild, set := false, map[string]bool{}
		for _, n := range req.ResourceNames {
			if n == "*" {
				wild = true
			} else {
				set[n] = true
			}
		}
		if (i == 0 || i == 2) && len(req.ResourceNames) == 0 && (first || s.curWild) {
			wild = true
		}
		changed := first || wild != s.curWild || len(set) != len(s.cur)
		for n := range set {
			changed = changed || !s.cur[n]
		}
		s.curWild, s.cur = wild, set
		if changed && !s.future {
			d.mustType = i
		}
	}
	s.open = true
	s.asked = slices.Clone(req.ResourceNames)
	for _, n := range req.ResourceNames {
		if n == "*" {
			s.wild = true
		}
		s.names[n] = true
	}
	if (i == 0 || i == 2) && len(req.ResourceNames) == 0 {
		s.wild = true
	}
}

// await checks responses until the barrier's answer: the next route
// response.
func (d *sotwRun) await(recv <-chan *discoveryv3.DiscoveryResponse, done <-chan error, valid bool) (bool, error) {
	deadline := time.After(fuzzWait)
	for {
		select {
		case r, ok := <-recv:
			if !ok {
				recv = nil
				continue
			}
			if err := d.check(r); err != nil {
				return true, err
			}
			if r.TypeUrl == resourcev3.RouteType {
				if d.mustType >= 0 {
					return true, fmt.Errorf("a request of type %d, the first or one that changed its names, was not answered", d.mustType)
				}
				return false, nil
			}
		case err := <-done:
			return true, ending(err, valid)
		case <-deadline:
			return true, fmt.Errorf("no answer to the barrier within %v", fuzzWait)
		}
	}
}

// check checks one response against what the stream asked for.
func (d *sotwRun) check(r *discoveryv3.DiscoveryResponse) error {
	i := deltaTypeIndex(r.TypeUrl)
	if i < 0 || !d.subs[i].open {
		return fmt.Errorf("a response of type %q, which the stream did not ask for", r.TypeUrl)
	}
	if r.Nonce == "" || d.nonces[r.Nonce] {
		return fmt.Errorf("a response with nonce %q (empty or sent before)", r.Nonce)
	}
	d.nonces[r.Nonce] = true
	if r.VersionInfo == "" {
		return fmt.Errorf("a response of %s without a version", r.TypeUrl)
	}
	s := &d.subs[i]
	seen := map[string]bool{}
	for _, res := range r.Resources {
		name, err := resourceName(r.TypeUrl, res)
		switch {
		case err != nil:
			return fmt.Errorf("a resource of %s: %v", r.TypeUrl, err)
		case seen[name]:
			return fmt.Errorf("resource %q twice in one response", name)
		case !s.wild && !s.names[name]:
			return fmt.Errorf("resource %q of %s, which the stream never asked for (names %v)", name, r.TypeUrl, slices.Sorted(maps.Keys(s.names)))
		case d.shopOnly && namespaceOf(name) != "shop":
			return fmt.Errorf("resource %q sent to a token that may read only namespace shop", name)
		}
		seen[name] = true
	}
	if i == d.mustType {
		d.mustType = -1
	}
	s.last = r
	d.got++
	return nil
}
