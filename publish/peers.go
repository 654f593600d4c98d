package publish

import (
	"slices"
	"strings"

	"github.com/cairn-sd/cairn/status"
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
