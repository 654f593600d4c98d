package kubesync

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cairn-sd/cairn/wire"
)

func sl(name string, typ discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "9"}, AddressType: typ, Ports: ports, Endpoints: eps}
}

func endpoint(pod, uid string, addrs ...string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: addrs, Zone: ptr.To("a"),
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID(uid)}}
}

func port(name string, n int32) discoveryv1.EndpointPort {
	p := discoveryv1.EndpointPort{Port: ptr.To(n)}
	if name != "" {
		p.Name = ptr.To(name)
	}
	return p
}

func TestDesired(t *testing.T) {
	def := wire.Service{Namespace: "shop", Name: "web", Ports: []wire.Port{{Name: "http", Number: 80}, {Name: "admin", Number: 81}}}
	v4 := sl("web-v4", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("http", 8080), port("metrics", 9090)},
		endpoint("web-a", "u1", "10.0.0.1"),
		endpoint("Web_B", "u2", "10.0.0.2"),                   // not a DNS label
		discoveryv1.Endpoint{Addresses: []string{"10.0.0.9"}}, // no pod behind it
		endpoint("web-c", "u3", "10.0.0.3"),
	)
	v6 := sl("web-v6", discoveryv1.AddressTypeIPv6, []discoveryv1.EndpointPort{port("http", 8080), port("admin", 8081)},
		endpoint("web-a", "u1", "fd00::0001"))
	fqdn := sl("web-x", discoveryv1.AddressTypeFQDN, nil, endpoint("web-f", "u9", "example.com"))
	// Another Kubernetes namespace mapped to the same cairn service: its
	// web-c is a clash, its web-d new.
	other := Source{Namespace: "shop-2", Slices: []*discoveryv1.EndpointSlice{
		sl("web-o", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("http", 8080)}, endpoint("web-c", "u7", "10.0.1.3"), endpoint("web-d", "u8", "10.0.1.4")),
	}}
	got, skipped := Desired(def, []Source{{Namespace: "shop", Slices: []*discoveryv1.EndpointSlice{v6, fqdn, v4}}, other})
	var ids []string
	for _, d := range got {
		ids = append(ids, d.ID)
	}
	if !slices.Equal(ids, []string{"web-a", "web-c", "web-d"}) {
		t.Fatalf("endpoints %v, want web-a, web-c, web-d", ids)
	}
	a := got[0]
	if !slices.Equal(a.Addresses, []string{"10.0.0.1", "fd00::1"}) || !maps.Equal(a.Ports, map[string]int{"http": 8080, "admin": 8081}) ||
		!a.Ready || !a.Serving || a.Terminating || a.Zone != "a" || a.UID != "u1" {
		t.Errorf("web-a, dual stack: %+v; want both addresses (canonical), the ports the service names, ready", a)
	}
	if got[1].UID != "u3" {
		t.Errorf("web-c from %s, want the first namespace's (u3)", got[1].UID)
	}
	want := Skipped{SkipBadID: 1, SkipNoPod: 1, SkipAddrType: 1, SkipDuplicate: 1}
	if !maps.Equal(skipped, want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}

	// One unnamed port, and a service of one port: that port.
	one := wire.Service{Ports: []wire.Port{{Name: "grpc", Number: 80}}}
	got, _ = Desired(one, []Source{{Namespace: "shop", Slices: []*discoveryv1.EndpointSlice{
		sl("s", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("", 9000)}, endpoint("p", "u", "10.0.0.1"))}}})
	if len(got) != 1 || got[0].Ports["grpc"] != 9000 {
		t.Errorf("an unnamed port into a one-port service: %+v, want grpc=9000", got)
	}
	// No port the service has: skipped.
	_, skipped = Desired(def, []Source{{Namespace: "shop", Slices: []*discoveryv1.EndpointSlice{
		sl("s", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("other", 9000)}, endpoint("p", "u", "10.0.0.1"))}}})
	if skipped[SkipNoPort] != 1 {
		t.Errorf("a slice of no port of the service: skipped %v, want no_port", skipped)
	}
}

// TestDesiredReplacedPod: while the slices still hold the old pod of a
// name beside its replacement, the live one wins, whichever slice
// comes first.
func TestDesiredReplacedPod(t *testing.T) {
	def := wire.Service{Ports: []wire.Port{{Name: "http", Number: 80}}}
	old := endpoint("web-0", "old", "10.0.0.1")
	old.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	repl := endpoint("web-0", "new", "10.0.0.2")
	ports := []discoveryv1.EndpointPort{port("http", 8080)}
	for _, order := range [][]*discoveryv1.EndpointSlice{
		{sl("a", discoveryv1.AddressTypeIPv4, ports, old), sl("b", discoveryv1.AddressTypeIPv4, ports, repl)},
		{sl("a", discoveryv1.AddressTypeIPv4, ports, repl), sl("b", discoveryv1.AddressTypeIPv4, ports, old)},
	} {
		got, _ := Desired(def, []Source{{Namespace: "shop", Slices: order}})
		if len(got) != 1 || got[0].UID != "new" || got[0].Terminating || !slices.Equal(got[0].Addresses, []string{"10.0.0.2"}) {
			t.Errorf("%+v, want the replacement alone", got)
		}
	}
}
