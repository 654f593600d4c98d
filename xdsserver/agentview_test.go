package xdsserver_test

import (
	"context"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/cairn-sd/cairn/internal/agentview"
	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
)

// agentView decodes the one view resp carries.
func agentView(t *testing.T, resp *discoveryv3.DeltaDiscoveryResponse) *agentview.View {
	t.Helper()
	if len(resp.Resources) != 1 {
		t.Fatalf("%d resources, want the one view", len(resp.Resources))
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := resp.Resources[0].Resource.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	v, err := agentview.Decode(cla)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAgentViews: an agent's view "<svc>.<ns>" holds every member, in
// rotation or not, with what the agent's DNS server needs; it is
// stamped with the store revision its content last changed at, so a
// table that changes nothing of it neither resends it nor moves its
// revision; a change does both; a service that does not exist is
// reported removed at once.
func TestAgentViews(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, withdrawn}) // revision 1001
	c := newDeltaClient(t, ctx, startXDS(t, pub))

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop", "cart.shop"}})
	r1 := c.recv(resourcev3.EndpointType)
	expect(t, "first subscription", r1, []string{"pay.shop"}, []string{"cart.shop"})
	c.ack(r1, false)
	v := agentView(t, r1)
	if v.Revision != 1001 || len(v.Instances) != 2 {
		t.Fatalf("view at revision %d with %d instances, want 1001 and both members", v.Revision, len(v.Instances))
	}
	if in := v.Instances[0]; in.ID != "pay-0" || !in.Eligible() || in.Weight != 100 || in.Ports["grpc"] == 0 || in.Region != "eu" || in.Zone != "eu-1a" {
		t.Errorf("pay-0: %+v", in)
	}
	if in := v.Instances[1]; in.ID != "pay-1" || in.Eligible() || in.Verdict != cstatus.Unhealthy {
		t.Errorf("pay-1, withdrawn, is in the view as %+v", in)
	}

	// Revision 1002 changes nothing of pay: nothing is sent. Revision
	// 1003 brings pay-1 back: the view comes at 1003.
	twoServices(t, tb, false, []cstatus.Entry{inRotation, withdrawn})
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation})
	r2 := c.recv(resourcev3.EndpointType)
	c.ack(r2, false)
	if v2 := agentView(t, r2); v2.Revision != 1003 || !v2.Instances[1].Eligible() {
		t.Errorf("after pay-1's return: revision %d, pay-1 eligible %v; want 1003, true", v2.Revision, v2.Instances[1].Eligible())
	}
	if versions(r2)["pay.shop"] == versions(r1)["pay.shop"] {
		t.Error("the view changed but its version did not")
	}
}

// TestDeltaResponsesNameTheirRevision: every delta response names, in
// system_version_info, the store revision of the table it is built
// from — a removal too, which carries no version of its own: an agent
// holding a view from a newer table than a server's refuses that
// server's word that the view does not exist.
func TestDeltaResponsesNameTheirRevision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pub := tb.Publisher
	twoServices(t, tb, false, []cstatus.Entry{inRotation, inRotation}) // revision 1001
	c := newDeltaClient(t, ctx, startXDS(t, pub))

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"pay.shop"}})
	r1 := c.recv(resourcev3.EndpointType)
	expect(t, "first subscription", r1, []string{"pay.shop"}, nil)
	c.ack(r1, false)
	if r1.SystemVersionInfo != "1001" {
		t.Errorf("first response: system_version_info %q, want the table's store revision 1001", r1.SystemVersionInfo)
	}

	// Revision 1002 has no pay: its removal names 1002.
	publishServices(t, tb, []cstatus.ServiceInfo{{}}, nil, nil)
	r2 := c.recv(resourcev3.EndpointType)
	expect(t, "pay deleted", r2, nil, []string{"pay.shop"})
	c.ack(r2, false)
	if r2.SystemVersionInfo != "1002" {
		t.Errorf("removal: system_version_info %q, want the table's store revision 1002", r2.SystemVersionInfo)
	}
}
