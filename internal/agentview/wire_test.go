package agentview

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-sd/cairn/status"
)

// marshal is the encoding a Wire must equal: Encode's message, encoded
// deterministically.
func marshal(t testing.TB, v *View) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wire is v.Wire(prev) checked: its body is v's encoding, and the
// content it wrote is v's at revision 0.
func wire(t *testing.T, v *View, prev *Wire) *Wire {
	t.Helper()
	var content bytes.Buffer
	w, err := v.Wire(prev, &content)
	if err != nil {
		t.Fatal(err)
	}
	if want := marshal(t, v); !bytes.Equal(w.Body, want) {
		t.Fatalf("Wire's body differs from the message's encoding:\n got %x\nwant %x", w.Body, want)
	}
	v0 := *v
	v0.Revision = 0
	if want := marshal(t, &v0); !bytes.Equal(content.Bytes(), want) {
		t.Fatal("Wire's content differs from the encoding at revision 0")
	}
	return w
}

// TestWireFieldNumbers: the numbers Wire writes by hand are the
// messages' own.
func TestWireFieldNumbers(t *testing.T) {
	cla := (&endpointv3.ClusterLoadAssignment{}).ProtoReflect().Descriptor().Fields().ByName("endpoints")
	lle := (&endpointv3.LocalityLbEndpoints{}).ProtoReflect().Descriptor().Fields().ByName("lb_endpoints")
	if cla.Number() != fieldEndpoints || lle.Number() != fieldLbEndpoints {
		t.Fatalf("endpoints %d, lb_endpoints %d; Wire writes %d and %d", cla.Number(), lle.Number(), fieldEndpoints, fieldLbEndpoints)
	}
}

// TestWireIsTheEncoding: a Wire made from nothing is the message's
// deterministic encoding, byte for byte, for the sample views; so the
// golden bytes and the digests servers compare stay what they were.
func TestWireIsTheEncoding(t *testing.T) {
	for _, v := range []*View{sample(), {Service: sample().Service}, {Revision: 7, Service: status.ServiceInfo{Namespace: "a", Name: "b"}}} {
		wire(t, v, nil)
	}
}

// TestWireFollowsEveryChange: over a random walk of a service's members
// (verdicts, weights, flags, shifts, addresses, ports, incarnations,
// zones, members coming and going, the service's ports and policy),
// each view's Wire made from the one before is the view's encoding.
// And it is made from the one before: a view with one member changed
// re-encodes that member only (the rest are copied from prev).
func TestWireFollowsEveryChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	v := sample()
	for i := range 40 {
		v.Instances = append(v.Instances, member(rng, i))
	}
	w := wire(t, v, nil)
	for step := range 600 {
		v = mutate(rng, v, step)
		w = wire(t, v, w)
	}
}

// TestWireReusesWhatIsUnchanged: a view with one member changed
// encodes one member (a Wire reuses the rest).
func TestWireReusesWhatIsUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	v := &View{Revision: 1, Service: sample().Service}
	for i := range 50 {
		v.Instances = append(v.Instances, member(rng, i))
	}
	w := wire(t, v, nil)
	v.Revision++
	v.Instances[17].Weight++
	fresh := testing.AllocsPerRun(20, func() { _, _ = v.Wire(nil, nil) })
	reused := testing.AllocsPerRun(20, func() { _, _ = v.Wire(w, nil) })
	if reused*5 > fresh {
		t.Fatalf("a view with one member changed made %.0f allocations from the last one, %.0f from nothing: the rest were encoded again", reused, fresh)
	}
}

// member is a random member i.
func member(rng *rand.Rand, i int) Instance {
	zones := []string{"eu-1a", "eu-1b", "eu-1c", ""}
	in := Instance{InstanceInfo: status.InstanceInfo{ID: fmt.Sprintf("m%02d", i), Incarnation: rng.Uint64N(1 << 62),
		Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(i), 1})},
		Ports: map[string]uint16{"http": uint16(8000 + i), "dns": 53}},
		Region: "eu", Zone: zones[rng.IntN(len(zones))], Verdict: status.Healthy, Lifecycle: status.Ready,
		Flags: status.Eligible, Weight: 100, BaseWeight: 100}
	return in
}

// mutate returns v with one random change, as a new View sharing what
// is unchanged (as the server's views of one service share the
// directory's instances).
func mutate(rng *rand.Rand, v *View, step int) *View {
	n := *v
	n.Revision++
	n.Instances = slices.Clone(v.Instances)
	if len(n.Instances) == 0 {
		n.Instances = append(n.Instances, member(rng, step))
		return &n
	}
	k := rng.IntN(len(n.Instances))
	in := &n.Instances[k]
	switch rng.IntN(13) {
	case 0:
		in.Verdict = status.Verdict(rng.IntN(int(status.Quarantined) + 1))
	case 1:
		in.Weight = uint16(rng.IntN(101))
	case 2:
		in.Flags ^= status.Flags(1 << rng.IntN(8))
	case 3:
		in.Shift = uint8(rng.IntN(11))
	case 4:
		in.Addrs = append(slices.Clone(in.Addrs), netip.AddrFrom4([4]byte{10, 2, byte(step), byte(k)}))
	case 5:
		ports := map[string]uint16{"http": uint16(rng.IntN(65536))}
		if rng.IntN(2) == 0 {
			ports["dns"] = 53
		}
		in.Ports = ports
	case 6:
		in.Incarnation++
	case 7:
		in.Zone = []string{"eu-1a", "eu-1b", "eu-1c", ""}[rng.IntN(4)]
	case 8:
		n.Instances = slices.Delete(n.Instances, k, k+1)
	case 9:
		n.Instances = append(n.Instances, member(rng, 100+step))
	case 10:
		in.Lifecycle = status.Lifecycle(rng.IntN(int(status.Terminated) + 1))
	case 11:
		// The service's first port changes: every member's own number
		// for it changes with it.
		svc := n.Service
		svc.Ports = slices.Clone(svc.Ports)
		svc.Ports[0], svc.Ports[1] = svc.Ports[1], svc.Ports[0]
		n.Service = svc
	case 12:
		in.BaseWeight = uint16(rng.IntN(1000))
	}
	return &n
}
