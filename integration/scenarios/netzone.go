package scenarios

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/scenarios/fleet"
)

// A zone behind a network (Config.NetlabZone): for a fault that lives in
// the network between the servers and one zone's instances (experiment
// 6, probers_partition_test.go). The zone's instances run in a second
// fleet process inside netlab host sdN (N: the zone's place in Zones(),
// from 1; netlab.go), each on an address of the zone's NetlabSubnet (a
// local route of the whole prefix on that namespace's lo), and this
// namespace routes the prefix to the host over netlab's link. The
// servers stay on loopback, in this namespace; their --subnet places the
// prefix in the zone.
//
// Two kinds of traffic reach those instances from this namespace, told
// apart by their source address (docs/decisions.md, "Probers cut off
// from a zone"):
//   - the servers' probes leave from LabServer (10.199.0.254), the
//     link's address and the route's source;
//   - the synthetic callers' requests leave from CallerSource
//     (10.199.0.253), an alias on the link they bind to (the callers'
//     Config.SourceFor, set by StartPopulation).
//
// PartitionProbers drops, inside the host, every packet from the
// servers' address to the zone's instances: the probes time out (a
// dropped SYN: no refusal, no reset), the callers' requests still pass.
// HealProbers removes the rule.

// CallerSource is the address the callers' requests to a netlab zone's
// instances leave from.
const CallerSource = integration.LabNet + ".253"

// NetlabSubnet is the prefix of zone z's instances when z is the
// region's NetlabZone: 10.(200+Z).0.0/16, Z its ZoneOctet (zone c:
// 10.213.0.0/16).
func NetlabSubnet(z string) string { return fmt.Sprintf("10.%d.0.0/16", 200+ZoneOctet(z)) }

// netlabAddr is the i-th address (from 0) of zone z's NetlabSubnet, laid
// out as ZoneAddr lays out 127.Z.0.0/16.
func netlabAddr(z string, i int) string {
	return fmt.Sprintf("10.%d.%d.%d", 200+ZoneOctet(z), i/254, i%254+1)
}

// netlabHost is the netlab host of zone z.
func netlabHost(z string) int { return slices.Index(Zones(), z) + 1 }

// zoneAddr is the i-th address of zone z in the region cfg lays out.
func (c Config) zoneAddr(z string, i int) string {
	if z != "" && z == c.NetlabZone {
		return netlabAddr(z, i)
	}
	return ZoneAddr(z, i)
}

// checkNetlabZone checks Config.NetlabZone.
func (c Config) checkNetlabZone() error {
	if c.NetlabZone != "" && !slices.Contains(Zones(), c.NetlabZone) {
		return fmt.Errorf("scenarios: Config.NetlabZone: %q is not a zone of the region %v", c.NetlabZone, Zones())
	}
	return nil
}

// netZone is a region's zone behind a network: netlab, and the fleet
// process of the zone's instances in its host.
type netZone struct {
	zone string
	lab  *integration.Netlab
	host int
}

// startNetlab brings netlab up for the region's NetlabZone (it skips t
// where it cannot, as NeedNetlab does, and holds netlab's lock until t
// ends), gives the zone's host its prefix and this namespace the
// callers' address.
func (r *Region) startNetlab(t testing.TB) {
	t.Helper()
	z := r.NetlabZone
	lab := integration.NeedNetlab(t)
	nz := &netZone{zone: z, lab: lab, host: netlabHost(z)}
	lab.Range(nz.host, NetlabSubnet(z), integration.LabServer)
	lab.Alias(CallerSource)
	r.net = nz
}

// startFleets starts the fleet process of every instance outside the
// NetlabZone and, with one, the zone's fleet in its host, its control
// API on the host's address.
func (r *Region) startFleets() (main, zoned *FleetProcess, err error) {
	var spec, zspec fleet.Spec
	for _, in := range r.instances {
		if r.net != nil && in.Zone == r.net.zone {
			zspec.Instances = append(zspec.Instances, in.Instance)
		} else {
			spec.Instances = append(spec.Instances, in.Instance)
		}
	}
	if r.net != nil {
		zspec.Control = integration.LabAddr(r.net.host) + ":0"
		dir := filepath.Join(r.dir, "zone-"+r.net.zone)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
		if zoned, err = StartFleetIn(dir, zspec, time.Minute, integration.LabHost(r.net.host)); err != nil {
			return nil, nil, fmt.Errorf("the fleet of zone %s in %s: %w", r.net.zone, integration.LabHost(r.net.host), err)
		}
	}
	if main, err = StartFleet(r.dir, spec, time.Minute); err != nil {
		if zoned != nil {
			zoned.Close()
		}
		return nil, nil, err
	}
	return main, zoned, nil
}

// netlabSubnetArgs are the servers' --subnet flag for the NetlabZone's
// prefix, if any.
func (r *Region) netlabSubnetArgs() []string {
	if r.NetlabZone == "" {
		return nil
	}
	return []string{"--subnet", NetlabSubnet(r.NetlabZone) + "=" + RegionName + "/" + r.NetlabZone}
}

// SourceFor is the callers' Config.SourceFor: CallerSource for an
// instance of the NetlabZone, the caller's default otherwise; nil
// without a NetlabZone.
func (r *Region) SourceFor() func(netip.Addr) netip.Addr {
	if r.NetlabZone == "" {
		return nil
	}
	prefix := netip.MustParsePrefix(NetlabSubnet(r.NetlabZone))
	src := netip.MustParseAddr(CallerSource)
	return func(dst netip.Addr) netip.Addr {
		if prefix.Contains(dst) {
			return src
		}
		return netip.Addr{}
	}
}

// PartitionProbers cuts the servers off from the NetlabZone's instances:
// inside the zone's host, every packet from the servers' address
// (LabServer) to the zone's prefix is dropped, so that their probes get
// no answer at all; the callers' requests (from CallerSource) and the
// zone fleet's control API (on the host's own address) still pass. It
// fails t without a NetlabZone.
func (r *Region) PartitionProbers(t testing.TB) {
	t.Helper()
	if r.net == nil {
		t.Fatal("scenarios: PartitionProbers needs a region with Config.NetlabZone")
	}
	r.net.lab.IPTables(r.net.host, "-A", "INPUT", "-s", integration.LabServer, "-d", NetlabSubnet(r.net.zone), "-j", "DROP")
}

// HealProbers removes the partition: every fault rule of the zone's
// host.
func (r *Region) HealProbers(t testing.TB) {
	t.Helper()
	if r.net == nil {
		t.Fatal("scenarios: HealProbers needs a region with Config.NetlabZone")
	}
	r.net.lab.Heal(r.net.host)
}
