package agentview

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/cairn-sd/cairn/status"
)

func sample() *View {
	return &View{Revision: 1 << 60, Service: status.ServiceInfo{Namespace: "shop", Name: "cart",
		Ports:  []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}, {Name: "dns", Number: 53, Protocol: "udp"}},
		DNSTTL: 5 * time.Second, ARecordLimit: 8, MinHealthyFraction: 0.5, MaxEjectionPercent: 10, ShrinkCap: 0.33, ShrinkWindow: 10 * time.Second},
		Instances: []Instance{
			{InstanceInfo: status.InstanceInfo{ID: "a", Incarnation: 1<<62 + 1, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")},
				Ports: map[string]uint16{"http": 8080, "dns": 5353}}, Region: "eu", Zone: "eu-1a",
				Verdict: status.Healthy, Lifecycle: status.Ready, Flags: status.Eligible | status.SlowStart, Weight: 40, BaseWeight: 100},
			{InstanceInfo: status.InstanceInfo{ID: "b", Incarnation: 2, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}, Ports: map[string]uint16{"http": 80}},
				Region: "us", Verdict: status.Unhealthy, Lifecycle: status.Draining, BaseWeight: 7},
			{InstanceInfo: status.InstanceInfo{ID: "c", Incarnation: 3}, Verdict: status.Unknown, Lifecycle: status.Starting, BaseWeight: 1},
		}}
}

// TestRoundTrip: what Encode writes, Decode reads back whole, numbers
// past 2^53 included; the same view encodes to the same bytes.
func TestRoundTrip(t *testing.T) {
	v := sample()
	cla := v.Encode()
	got, err := Decode(cla)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, v)
	}
	a, _ := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(sample().Encode())
	if string(a) != string(b) {
		t.Error("the same view encoded to different bytes")
	}
	empty := &View{Service: v.Service}
	if got, err := Decode(empty.Encode()); err != nil || len(got.Instances) != 0 {
		t.Errorf("a view without instances: %v, %v", got, err)
	}
}

// TestStamp: a view encoded at revision 0 and stamped is the view
// encoded at the revision, to the byte.
func TestStamp(t *testing.T) {
	at := sample()
	zero := sample()
	zero.Revision = 0
	cla := zero.Encode()
	Stamp(cla, at.Revision)
	a, _ := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(at.Encode())
	if string(a) != string(b) {
		t.Error("stamped: not the view encoded at the revision")
	}
	if got, err := Decode(cla); err != nil || got.Revision != at.Revision {
		t.Errorf("stamped view decodes to revision %v (%v); want %d", got, err, at.Revision)
	}
	Stamp(&endpointv3.ClusterLoadAssignment{}, 7) // not Encode's: untouched, no panic
}

// TestDecodeRefuses: each broken field is refused with an error naming
// it.
func TestDecodeRefuses(t *testing.T) {
	cases := map[string]struct {
		field string
		mess  func(c *endpointv3.ClusterLoadAssignment)
	}{
		"name":          {"cluster_name", func(c *endpointv3.ClusterLoadAssignment) { c.ClusterName = "cart.shop:http" }},
		"no head":       {"endpoints[0]", func(c *endpointv3.ClusterLoadAssignment) { c.Endpoints = c.Endpoints[1:] }},
		"revision":      {"cairn.service.revision", func(c *endpointv3.ClusterLoadAssignment) { head(c)["revision"] = structpb.NewNumberValue(3) }},
		"port protocol": {"ports[0].protocol", func(c *endpointv3.ClusterLoadAssignment) { port(c)["protocol"] = structpb.NewStringValue("sctp") }},
		"port number":   {"ports[0].number", func(c *endpointv3.ClusterLoadAssignment) { port(c)["number"] = structpb.NewNumberValue(70000) }},
		"fraction":      {"shrink_cap", func(c *endpointv3.ClusterLoadAssignment) { head(c)["shrink_cap"] = structpb.NewNumberValue(2) }},
		"hostname":      {"hostname", func(c *endpointv3.ClusterLoadAssignment) { ep(c, "a").GetEndpoint().Hostname = "a b" }},
		"verdict":       {"verdict", func(c *endpointv3.ClusterLoadAssignment) { inst(c)["verdict"] = structpb.NewStringValue("fine") }},
		"weight":        {"weight", func(c *endpointv3.ClusterLoadAssignment) { inst(c)["weight"] = structpb.NewNumberValue(0) }},
		"address": {"address[0]", func(c *endpointv3.ClusterLoadAssignment) {
			ep(c, "a").GetEndpoint().Address.GetSocketAddress().Address = "example.com"
		}},
		"twice": {"given twice", func(c *endpointv3.ClusterLoadAssignment) {
			ep(c, "b").GetEndpoint().Hostname = "a"
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cla := sample().Encode()
			tc.mess(cla)
			_, err := Decode(cla)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Decode: %v; want ErrInvalid naming %s", err, tc.field)
			}
		})
	}
}

func head(c *endpointv3.ClusterLoadAssignment) map[string]*structpb.Value {
	return c.Endpoints[0].Metadata.FilterMetadata[ServiceKey].Fields
}

func port(c *endpointv3.ClusterLoadAssignment) map[string]*structpb.Value {
	return head(c)["ports"].GetListValue().Values[0].GetStructValue().Fields
}

func inst(c *endpointv3.ClusterLoadAssignment) map[string]*structpb.Value {
	return ep(c, "a").Metadata.FilterMetadata[InstanceKey].Fields
}

// ep returns the endpoint of instance id.
func ep(c *endpointv3.ClusterLoadAssignment, id string) *endpointv3.LbEndpoint {
	for _, g := range c.Endpoints {
		for _, e := range g.LbEndpoints {
			if e.GetEndpoint().GetHostname() == id {
				return e
			}
		}
	}
	panic("no endpoint " + id)
}

// FuzzDecode: bytes from the network, decoded as an assignment, never
// panic Decode; what it accepts encodes and decodes to itself.
func FuzzDecode(f *testing.F) {
	b, _ := proto.Marshal(sample().Encode())
	f.Add(b)
	e, _ := proto.Marshal((&View{Service: sample().Service}).Encode())
	f.Add(e)
	f.Fuzz(func(t *testing.T, b []byte) {
		cla := &endpointv3.ClusterLoadAssignment{}
		if proto.Unmarshal(b, cla) != nil {
			return
		}
		v, err := Decode(cla)
		if err != nil {
			return
		}
		again, err := Decode(v.Encode())
		if err != nil {
			t.Fatalf("a view Decode accepted does not decode again: %v", err)
		}
		if !reflect.DeepEqual(again, v) {
			t.Fatalf("round trip changed the view:\n%+v\n%+v", v, again)
		}
	})
}

// TestShiftRoundTrip: an evacuation's shift travels to the agent; a
// view without one encodes no shift field, as before evacuations.
func TestShiftRoundTrip(t *testing.T) {
	v := sample()
	if md := v.Encode().Endpoints[1].LbEndpoints[0].GetMetadata().GetFilterMetadata()[InstanceKey].GetFields(); md["shift"] != nil {
		t.Fatalf("unshifted instance encodes a shift: %v", md["shift"])
	}
	v.Instances[0].Shift, v.Instances[1].Shift = 70, status.ShiftAll
	got, err := Decode(v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, v)
	}
	cla := v.Encode()
	cla.Endpoints[1].LbEndpoints[0].Metadata.FilterMetadata[InstanceKey].Fields["shift"] = structpb.NewNumberValue(101)
	if _, err := Decode(cla); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "shift") {
		t.Fatalf("shift 101: %v", err)
	}
}

// TestDecodeSharesPorts: instances with the same port numbers share one
// map once decoded (a map is most of what an instance costs the
// agent), and one with other numbers keeps its own.
func TestDecodeSharesPorts(t *testing.T) {
	v := &View{Service: status.ServiceInfo{Namespace: "shop", Name: "cart", Ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}}
	for i, p := range []uint16{8080, 8080, 9090, 8080} {
		v.Instances = append(v.Instances, Instance{InstanceInfo: status.InstanceInfo{ID: string(rune('a' + i)), Incarnation: 1,
			Ports: map[string]uint16{"http": p}}, Region: "eu", Zone: "eu-1a", Verdict: status.Healthy, Lifecycle: status.Ready})
	}
	got, err := Decode(v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, v)
	}
	ptr := func(i int) uintptr { return reflect.ValueOf(got.Instances[i].Ports).Pointer() }
	if ptr(0) != ptr(1) {
		t.Error("a and b, both 8080, hold two maps")
	}
	if ptr(2) == ptr(1) || ptr(2) == ptr(3) {
		t.Error("c, 9090, shares a map with 8080")
	}
}
