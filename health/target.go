package health

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TargetID is the probe target id of one incarnation of an instance.
func TargetID(key wire.InstanceKey, inc uint64) string {
	return key.String() + "#" + strconv.FormatUint(inc, 10)
}

// parseTarget splits a target id into the instance key string and the
// incarnation. Only the canonical form TargetID prints is accepted: the
// observer check hashes the id as sent, so "#007" must not pass for "#7".
func parseTarget(id string) (key string, inc uint64, ok bool) {
	i := strings.LastIndexByte(id, '#')
	if i <= 0 || i+1 < len(id) && id[i+1] == '0' {
		return "", 0, false
	}
	inc, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil || inc == 0 || strings.Count(id[:i], "/") != 2 {
		return "", 0, false
	}
	return id[:i], inc, true
}

// updateTargets gives the prober the targets assigned to this node.
func (n *Node) updateTargets() {
	p := n.cfg.Prober
	if p == nil {
		return
	}
	live := n.liveSet()
	self := p.Observer()
	var ts []probe.Target
	var skipped []error
	for _, cs := range n.pub.Catalog().Services {
		ck := cs.Def.Check
		if ck == nil {
			continue
		}
		kind, err := probe.ParseKind(ck.Type)
		if err != nil {
			continue
		}
		port, _ := cs.Def.Port(ck.Port)
		for i := range cs.Instances {
			in := &cs.Instances[i]
			if in.Lifecycle != status.Starting && in.Lifecycle != status.Ready || len(in.Addresses) == 0 {
				continue
			}
			id := TargetID(cs.StoreKey(i), in.Incarnation)
			if !probe.AssignedZoned(id, self, live, n.zoneOf, n.cfg.Replicas) {
				continue
			}
			addr, err := netip.ParseAddr(in.Addresses[0])
			if err != nil {
				continue
			}
			num := port.Number
			if v, ok := in.Ports[ck.Port]; ok && v > 0 {
				num = v
			}
			t := probe.Target{ID: id, Kind: kind, Addr: netip.AddrPortFrom(addr, uint16(num)),
				Interval: ck.Interval.D(), Timeout: ck.Timeout.D()}
			if kind == probe.HTTP {
				t.Path = ck.Path
			}
			// One target the prober refuses (a check path the store
			// let through, an unspecified address) must not stop the
			// whole set: SetTargets takes all or nothing.
			if err := t.Validate(); err != nil {
				skipped = append(skipped, err)
				continue
			}
			ts = append(ts, t)
		}
	}
	if slices.Equal(ts, n.targets) && n.targets != nil {
		return
	}
	if len(skipped) > 0 {
		n.log.Warn("instances not probed: invalid probe targets", "count", len(skipped), "first", skipped[0])
	}
	if err := p.SetTargets(ts); err != nil {
		n.log.Error("setting probe targets", "targets", len(ts), "err", err)
		return
	}
	n.targets = ts
	if n.targets == nil {
		n.targets = []probe.Target{}
	}
	n.m.targets.Set(float64(len(ts)))
}
