package xdsserver

import (
	"math"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/cairn-sd/cairn/status"
)

// An evacuated zone is the last priority for every caller, flagged
// cairn.evacuated, HEALTHY still (a preference, not a withdrawal); a
// zone returning takes back its share in the caller's merged priority.
func TestAssignmentEvacuatedZone(t *testing.T) {
	evac := healthy
	evac.Shift = status.ShiftAll
	tab, id, svc := table(t,
		ep{id: "a1", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: evac},
		ep{id: "a2", addrs: []string{"10.0.0.2"}, port: 8443, region: "eu", zone: "eu-1a", entry: evac},
		ep{id: "b1", addrs: []string{"10.0.1.1"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
		ep{id: "u1", addrs: []string{"10.0.2.1"}, port: 8443, region: "us", zone: "us-1a", entry: healthy},
	)
	svc.MinHealthyFraction = 0.5
	for _, loc := range []status.Locality{tab.LocalityOf("eu", "eu-1a"), tab.LocalityOf("us", "us-1a"), {}} {
		cla, _ := buildAssignment(tab, id, svc, "grpc", loc)
		if err := cla.ValidateAll(); err != nil {
			t.Fatalf("%v: %v", loc, err)
		}
		last := cla.Endpoints[len(cla.Endpoints)-1]
		for _, l := range cla.Endpoints[:len(cla.Endpoints)-1] {
			if l.Priority >= last.Priority || l.Locality.Zone == "eu-1a" {
				t.Fatalf("caller %v: %s at priority %d before the evacuated zone's %d", loc, l.Locality.Zone, l.Priority, last.Priority)
			}
		}
		if last.Locality.Zone != "eu-1a" || len(last.LbEndpoints) != 2 {
			t.Fatalf("caller %v: last locality %v", loc, last.Locality)
		}
		for _, lb := range last.LbEndpoints {
			if lb.HealthStatus != corev3.HealthStatus_HEALTHY || !lb.GetMetadata().GetFilterMetadata()["cairn"].GetFields()["evacuated"].GetBoolValue() {
				t.Fatalf("caller %v: evacuated endpoint %v", loc, lb)
			}
		}
	}
}

func TestAssignmentReturningZone(t *testing.T) {
	back := healthy
	back.Shift = 70 // a share of 0.3
	tab, id, svc := table(t,
		ep{id: "a1", addrs: []string{"10.0.0.1"}, port: 8443, region: "eu", zone: "eu-1a", entry: back},
		ep{id: "a2", addrs: []string{"10.0.0.2"}, port: 8443, region: "eu", zone: "eu-1a", entry: back},
		ep{id: "b1", addrs: []string{"10.0.1.1"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
		ep{id: "b2", addrs: []string{"10.0.1.2"}, port: 8443, region: "eu", zone: "eu-1b", entry: healthy},
	)
	svc.MinHealthyFraction = 0.5
	// The zone's own caller: one merged priority, the zone's localities
	// weighing 1.4 × 0.3 of it.
	cla, _ := buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1a"))
	w := map[string]float64{}
	for _, l := range cla.Endpoints {
		if l.Priority != 0 {
			t.Fatalf("priority %d in %v", l.Priority, l.Locality)
		}
		w[l.Locality.Zone] += float64(l.LoadBalancingWeight.GetValue())
	}
	if got := w["eu-1a"] / (w["eu-1a"] + w["eu-1b"]); math.Abs(got-0.42) > 0.001 {
		t.Fatalf("the returning zone weighs %.3f of its caller's priority, want 0.42", got)
	}
	// Another zone's caller: its own zone first, the returning one next
	// at a share of its weight.
	cla, _ = buildAssignment(tab, id, svc, "grpc", tab.LocalityOf("eu", "eu-1b"))
	for _, got := range flat(cla) {
		if got.locality == "eu/eu-1a" && (got.priority != 1 || got.weight != 30) {
			t.Fatalf("returning endpoint for eu-1b's caller: %+v, want priority 1 weight 30", got)
		}
	}
}
