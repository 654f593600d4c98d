package publish

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// Peers is what a node's table takes from other regions (package peer
// follows them): their instances of the services the store holds, laid
// out beside the store's, read-only. They are published as they came:
// no verdict of this region's evaluator, no probe of its prober, no
// evacuation of its store touches them.
type Peers interface {
	// Follow names the services the table holds ("<ns>/<svc>"), each
	// time the catalog's services change.
	Follow(services []string)
	// Instances returns the latest generation of the other regions'
	// instances, and them by service (sorted by id, read-only). Another
	// generation holds other instances or other states of them.
	Instances() (gen uint64, of func(namespace, service string) []status.Instance)
	// Changed is signalled when a new generation is made.
	Changed() <-chan struct{}
}

// Signal is the out-of-band failover signal (package failover).
type Signal interface {
	// Failovers returns the failovers it holds as of now, in force or
	// returning.
	Failovers(now time.Time) []wire.Evacuation
	// Changed is signalled when one starts or ends.
	Changed() <-chan struct{}
}

// layoutPeers lays out the other regions' instances of cs (the
// catalog's service si) after its own, but for those whose id one of
// its own has: the store's instance is this region's, and the name is
// its. Their Refs rank after the service's own instances, which is how
// build tells them apart.
func (n *Node) layoutPeers(si int, cs *Service, of func(ns, svc string) []status.Instance) (shadowed int) {
	for _, in := range of(cs.Key.Namespace, cs.Key.Name) {
		if _, own := slices.BinarySearchFunc(cs.Instances, in.ID, func(x Instance, id string) int {
			return strings.Compare(x.Key[cs.idOffset:], id)
		}); own {
			shadowed++
			continue
		}
		_, slot := n.w.Add(si, in)
		if slot >= 0 && n.slotInc[slot] != in.Incarnation {
			n.slotInc[slot] = in.Incarnation
			n.served[slot].Store(0)
		}
	}
	return shadowed
}

// follow tells Peers the catalog's services when they are not those it
// was told last.
func (n *Node) follow(svcs []Service) {
	if len(svcs) == len(n.followed) && !slices.ContainsFunc(svcs, func(cs Service) bool {
		i, _ := slices.BinarySearch(n.followed, cs.Key.String())
		return i == len(n.followed) || n.followed[i] != cs.Key.String()
	}) {
		return
	}
	keys := make([]string, len(svcs))
	for i := range svcs {
		keys[i] = svcs[i].Key.String()
	}
	slices.Sort(keys)
	n.followed = keys
	n.cfg.Peers.Follow(keys)
}

// signalRestored publishes the table kept on disk again, while it is
// served (the replica has not caught up), with the out-of-band signal's
// failovers applied as of now: the node restarted while its cluster has
// no quorum is one the signal is for. The kept table holds no service
// policy, so a return takes the default shift_back
// (wire.DefaultShiftBack). It publishes nothing when the shifts are the
// ones already published.
func (n *Node) signalRestored(now time.Time) {
	s := n.cfg.Restore
	if n.cfg.Signal == nil || s == nil || !n.restored.Load() {
		return
	}
	fos := n.cfg.Signal.Failovers(now)
	var key strings.Builder
	for _, e := range fos {
		fmt.Fprintf(&key, "%s=%.1f;", e.Scope(), e.Share(wire.DefaultShiftBack))
	}
	if key.String() == n.restoredShifts {
		return
	}
	_, err := n.cfg.Table.Build(func(b *status.Builder) error {
		s.Fill(b)
		es := b.Entries()
		for i := range es {
			e := &es[i]
			if !e.Used() || int(e.Service) >= len(s.ServiceInfos) {
				continue
			}
			svc := s.ServiceInfos[e.Service]
			region, zone := nameOf(s.Localities, e.Region), nameOf(s.Localities, e.Zone)
			for _, f := range fos {
				if f.Covers(svc.Namespace, svc.Name, region, zone) {
					e.Shift = max(e.Shift, evacShift(f, wire.DefaultShiftBack))
				}
			}
		}
		return nil
	})
	if err != nil {
		n.log.Error("applying the failover signal to the table kept on disk", "err", err)
		return
	}
	n.restoredShifts = key.String()
	n.log.Info("the failover signal applied to the table kept on disk", "failovers", len(fos))
}

// nameOf is the name with id in names (ids from 1; 0 and unknown ids:
// "").
func nameOf(names []string, id uint16) string {
	if id == 0 || int(id) > len(names) {
		return ""
	}
	return names[id-1]
}
