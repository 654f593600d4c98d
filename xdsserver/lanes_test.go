package xdsserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
)

// publishPayCart builds the next table with pay.shop (port grpc) and
// cart.shop (port http), two instances each, with the entries given.
func publishPayCart(t *testing.T, tb *statustest.Table, pay, cart [2]cstatus.Entry) {
	t.Helper()
	svcs := []statustest.Service{
		{ServiceInfo: cstatus.ServiceInfo{Namespace: "shop", Name: "pay", Ports: []cstatus.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}}},
		{ServiceInfo: cstatus.ServiceInfo{Namespace: "shop", Name: "cart", Ports: []cstatus.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}}}
	for i, e := range append(pay[:], cart[:]...) {
		s := &svcs[i/2]
		port := s.Ports[0]
		in := statustest.FromEntry(fmt.Sprintf("i-%d", i), e, fmt.Sprintf("10.0.%d.%d", 1+i/2, 1+i%2)).In("eu", "eu-1a")
		in.Ports = map[string]uint16{port.Name: port.Number}
		s.Instances = append(s.Instances, in)
	}
	tb.Publish(t, svcs...)
}

func weighted(w uint16) cstatus.Entry { e := inRotation; e.Weight = w; return e }

// weights returns an assignment's endpoint weights, by address.
func weights(t *testing.T, cla *endpointv3.ClusterLoadAssignment) map[string]uint32 {
	t.Helper()
	out := map[string]uint32{}
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			out[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = e.GetLoadBalancingWeight().GetValue()
		}
	}
	return out
}

func deferred(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cairn_xds_admissions_deferred_total" {
			continue
		}
		for _, m := range mf.Metric {
			if m.Label[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestWithdrawalsDoNotWaitForAdmissions: an admission (here a weight
// change) after a quiet spell goes at once; the next one within the
// admission interval is held back to coalesce, counted; a withdrawal
// meanwhile goes at once, alone; and what was held back goes at the
// latest after MaxAdmissionDelay. Over delta and state of the world.
func TestWithdrawalsDoNotWaitForAdmissions(t *testing.T) {
	for _, proto := range []string{"delta", "sotw"} {
		t.Run(proto, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tb := statustest.New(t, 8)
			pub := tb.Publisher
			in := [2]cstatus.Entry{inRotation, inRotation}
			publishPayCart(t, tb, in, in)
			reg := prometheus.NewRegistry()
			srv, err := xdsserver.New(xdsserver.Config{Table: pub, Registerer: reg, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
				AdmissionInterval: time.Hour, MaxAdmissionDelay: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, srv)
			names := []string{"cart.shop:http", "pay.shop:grpc"}
			// next returns the assignments of the next response, by name,
			// acknowledging it.
			var next func() map[string]*endpointv3.ClusterLoadAssignment
			switch proto {
			case "delta":
				c := newDeltaClient(t, ctx, addr)
				c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: names})
				next = func() map[string]*endpointv3.ClusterLoadAssignment {
					resp := c.recv(resourcev3.EndpointType)
					c.ack(resp, false)
					out := map[string]*endpointv3.ClusterLoadAssignment{}
					for _, r := range resp.Resources {
						var cla endpointv3.ClusterLoadAssignment
						if err := r.Resource.UnmarshalTo(&cla); err != nil {
							t.Fatal(err)
						}
						out[r.Name] = &cla
					}
					return out
				}
			default:
				c := newADSClient(t, ctx, addr)
				c.send(resourcev3.EndpointType, names, nil, false)
				next = func() map[string]*endpointv3.ClusterLoadAssignment {
					resp := c.recv(resourcev3.EndpointType)
					c.send(resourcev3.EndpointType, names, resp, false)
					out := map[string]*endpointv3.ClusterLoadAssignment{}
					for _, a := range resp.Resources {
						var cla endpointv3.ClusterLoadAssignment
						if err := a.UnmarshalTo(&cla); err != nil {
							t.Fatal(err)
						}
						out[cla.ClusterName] = &cla
					}
					return out
				}
			}
			if got := next(); len(got) != 2 {
				t.Fatalf("first answer: %d assignments, want 2", len(got))
			}

			// An admission after a quiet spell: at once.
			publishPayCart(t, tb, [2]cstatus.Entry{weighted(50), inRotation}, in)
			if got := next(); weights(t, got["pay.shop:grpc"])["10.0.1.1"] != 50 {
				t.Fatalf("first weight change: %v, want pay's first endpoint at 50", got)
			}
			// Another within the interval: held back (counted once). A
			// withdrawal then: at once, and (in delta) alone.
			publishPayCart(t, tb, [2]cstatus.Entry{weighted(60), inRotation}, in)
			for deadline := time.Now().Add(10 * time.Second); deferred(t, reg, "coalesce") != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the second weight change was not held back to coalesce")
				}
			}
			publishPayCart(t, tb, [2]cstatus.Entry{weighted(60), inRotation}, [2]cstatus.Entry{inRotation, withdrawn})
			got := next()
			if cart := got["cart.shop:http"]; cart == nil || len(weights(t, cart)) != 1 {
				t.Fatalf("after a withdrawal of cart's endpoint: %v, want cart with one endpoint", got)
			}
			if proto == "delta" {
				if _, ok := got["pay.shop:grpc"]; ok {
					t.Errorf("the withdrawal carried pay's held-back admission: %v", got)
				}
				// What was held back goes once MaxAdmissionDelay has passed.
				if w := weights(t, next()["pay.shop:grpc"])["10.0.1.1"]; w != 60 {
					t.Errorf("held-back weight change: pay's first endpoint at %d, want 60", w)
				}
			}
		})
	}
}

// TestAdmissionsShedUnderLoad: beyond the server's admission rate,
// admissions wait (counted as shed) and still arrive.
func TestAdmissionsShedUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	in := [2]cstatus.Entry{inRotation, inRotation}
	publishPayCart(t, tb, in, in)
	reg := prometheus.NewRegistry()
	srv, err := xdsserver.New(xdsserver.Config{Table: pub, Registerer: reg, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		AdmissionInterval: -1, AdmissionRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	var cs []*deltaClient
	for range 2 {
		c := newDeltaClient(t, ctx, addr)
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop:grpc"}})
		c.ack(c.recv(resourcev3.EndpointType), false)
		cs = append(cs, c)
	}
	// One token for two streams: one goes, the other waits for the next.
	publishPayCart(t, tb, [2]cstatus.Entry{weighted(50), inRotation}, in)
	for _, c := range cs {
		expect(t, "weight change", c.recv(resourcev3.EndpointType), []string{"pay.shop:grpc"}, nil)
	}
	if n := deferred(t, reg, "shed"); n != 1 {
		t.Errorf("admissions shed: %v, want 1", n)
	}
}

// TestDocumentedAdmissionBudget: the metrics table of docs/operating.md
// gives the admission budget's figure; it is DefaultAdmissionRate's.
func TestDocumentedAdmissionBudget(t *testing.T) {
	b, err := os.ReadFile("../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`admission budget, ([0-9,]+) responses a second`).FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/operating.md does not give the admission budget as \"admission budget, N responses a second\"")
	}
	got, err := strconv.Atoi(strings.ReplaceAll(string(m[1]), ",", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got != xdsserver.DefaultAdmissionRate {
		t.Errorf("docs/operating.md gives the admission budget as %s responses a second; DefaultAdmissionRate is %d", m[1], xdsserver.DefaultAdmissionRate)
	}
}
