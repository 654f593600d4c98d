package health

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// asideKey names one observer's evidence about one zone.
type asideKey struct{ observer, region, zone string }

func (k asideKey) String() string { return k.observer + " about " + k.region + "/" + k.zone }

// reach counts, for one observer and one zone, the targets of which it
// holds a fresh latest result, and how many of those got no answer at
// all; zone is how many instances of the zone any observer holds a fresh
// result of.
type reach struct{ total, soft, zone int }

// zoneKey is a locality.
type zoneKey struct{ region, zone string }

// minCorrelated is the fewest probed instances in a zone whose silence can
// be told from a silent instance: with one only, a timeout is the
// instance's, and a hung process must still leave. It counts the zone's
// instances, not one observer's share of them: with two observers per
// target, one of them may hold a single target of a three-instance zone.
const minCorrelated = 2

// correlation counts every observer's reach into every zone from its
// latest fresh probe result of each live instance. It takes n.mu a slice
// at a time (paced, between services). Freshness
// is the instance's service's (Node.freshness): the window in which its
// results count.
func (n *Node) correlation(now time.Time) map[asideKey]reach {
	out := map[asideKey]reach{}
	zones := map[zoneKey]int{}
	latest := n.latest[:0] // reused for every instance
	n.mu.Lock()
	defer func() {
		n.mu.Unlock()
		n.latest = latest[:0]
	}()
	for _, cs := range n.pub.Catalog().Services {
		fresh := n.freshness(cs.Policy)
		if n.pacer.Due() {
			n.mu.Unlock()
			n.pacer.Pause()
			n.mu.Lock()
		}
		for i := range cs.Instances {
			in := &cs.Instances[i]
			e := n.evidence[in.Key]
			if e == nil || e.inc != in.Incarnation {
				continue
			}
			counted := false
			latest = latestPerObserver(latest[:0], e.probes)
			for _, o := range latest {
				if now.Sub(o.at) > fresh {
					continue
				}
				k := asideKey{o.observer, in.Loc.Region, in.Loc.Zone}
				r := out[k]
				r.total++
				if o.soft {
					r.soft++
				}
				out[k] = r
				if !counted {
					zones[zoneKey{in.Loc.Region, in.Loc.Zone}]++
					counted = true
				}
			}
		}
	}
	for k, r := range out {
		r.zone = zones[zoneKey{k.region, k.zone}]
		out[k] = r
	}
	return out
}

// setAside reports whether r's share of silent targets sets its
// observer's evidence about the zone aside, at the service's fraction.
func setAside(r reach, fraction float64) bool {
	return r.zone >= minCorrelated && float64(r.soft) > fraction*float64(r.total)
}

// latestPerObserver appends to out each observer's latest observation
// in list, which holds a few per observer.
func latestPerObserver(out, list []obs) []obs {
	for _, o := range list {
		i := slices.IndexFunc(out, func(x obs) bool { return x.observer == o.observer })
		switch {
		case i < 0:
			out = append(out, o)
		case o.at.After(out[i].at):
			out[i] = o
		}
	}
	return out
}

// asideEvents compares one service's set-aside pairs with the last
// round's and returns an audit event for each change, naming the
// observer (SPEC §2).
func asideEvents(key wire.ServiceKey, prev, cur map[asideKey]bool, counts map[asideKey]reach) []store.ServiceEvent {
	var evs []store.ServiceEvent
	for k := range cur {
		if !prev[k] {
			r := counts[k]
			evs = append(evs, store.ServiceEvent{Kind: wire.EventProbesSetAside, Namespace: key.Namespace, Service: key.Name,
				Detail: fmt.Sprintf("prober %s got no answer from %d of its %d targets in zone %s/%s: its timeouts about that zone are set aside (silence, not failure)",
					k.observer, r.soft, r.total, orDash(k.region), orDash(k.zone))})
		}
	}
	for k := range prev {
		if !cur[k] {
			evs = append(evs, store.ServiceEvent{Kind: wire.EventProbesRestored, Namespace: key.Namespace, Service: key.Name,
				Detail: fmt.Sprintf("prober %s reaches zone %s/%s again: its evidence about that zone counts", k.observer,
					orDash(k.region), orDash(k.zone))})
		}
	}
	slices.SortFunc(evs, func(a, b store.ServiceEvent) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Detail, b.Detail))
	})
	return evs
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
