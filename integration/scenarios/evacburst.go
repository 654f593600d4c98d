package scenarios

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// Experiment 4 (evacburst_test.go): a zone evacuated during a burst of
// changes, and its return. This file is what the subscribers record:
// each change of the churn as each subscriber saw it, where each view
// put the zone, and the zone's share of the traffic over its return.

// ebZone is the zone evacuated.
const ebZone = "c"

// Latency histograms: 1 ms bins to 1 s, 10 ms to 10 s, 100 ms to 60 s,
// then one bin for the rest.
const histBins = 2401

func histBin(d time.Duration) int {
	ms := int(d / time.Millisecond)
	switch {
	case ms < 0:
		return 0
	case ms < 1000:
		return ms
	case ms < 10000:
		return 1000 + (ms-1000)/10
	case ms < 60000:
		return 1900 + (ms-10000)/100
	}
	return histBins - 1
}

// binUpper is the upper bound of bin b.
func binUpper(b int) time.Duration {
	switch {
	case b < 1000:
		return time.Duration(b+1) * time.Millisecond
	case b < 1900:
		return time.Duration(1000+(b-999)*10) * time.Millisecond
	case b < histBins-1:
		return time.Duration(10000+(b-1899)*100) * time.Millisecond
	}
	return time.Hour
}

// latHist counts latencies; safe for concurrent adds.
type latHist struct{ n [histBins]atomic.Int32 }

func (h *latHist) add(d time.Duration) { h.n[histBin(d)].Add(1) }

// latSum is histograms added up.
type latSum struct {
	n     [histBins]int64
	total int64
}

func (s *latSum) merge(h *latHist) {
	for i := range h.n {
		v := int64(h.n[i].Load())
		s.n[i] += v
		s.total += v
	}
}

// pct is the p-th percentile, as its bin's upper bound; -1 when empty.
func (s *latSum) pct(p float64) time.Duration {
	if s.total == 0 {
		return -1
	}
	need := int64(math.Ceil(p / 100 * float64(s.total)))
	var seen int64
	for i, v := range s.n {
		if seen += v; seen >= max(need, 1) {
			return binUpper(i)
		}
	}
	return binUpper(histBins - 1)
}

// ebObs is a churned endpoint in rotation in an assignment.
type ebObs struct{ weight uint32 }

// ebZoneEP is an endpoint of the evacuated zone in an assignment.
type ebZoneEP struct {
	ep        int32 // churn index; -1: not churned
	weight    uint32
	evacuated bool
}

// ebView is a decoded assignment.
type ebView struct {
	byEP  map[int32]ebObs
	zone  []ebZoneEP
	place xdstest.Placement
	// p0 is the zone's share of the weight at priority 0: of the load of
	// a client that has every endpoint healthy; others whether any
	// endpoint outside the zone is in rotation (else the zone takes the
	// whole load whatever its share).
	p0     float64
	others bool
	// prios is the number of priorities, maxW the highest weight: what
	// a diagnostic says of a view.
	prios int
	maxW  uint32
}

// ebEPState is a subscriber's account of one churned endpoint of a
// service it watches: the last change it saw (the index in the
// endpoint's changes; -1: the first registration), and how it saw it.
type ebEPState struct {
	cursor  int32
	present bool
	tag     int32
}

type ebMove struct {
	at time.Duration
	to xdstest.Placement
}

// ebPair is one subscriber's view of one service.
type ebPair struct {
	name   string
	seen   bool
	eps    []ebEPState
	place  xdstest.Placement
	moves  []ebMove
	p0, s  float64
	others bool
	fullAt time.Duration // once the return began; -1: not yet
}

// ebSub is one subscriber's record; its goroutine writes the pairs, the
// sampler reads the atomics.
type ebSub struct {
	zone         string
	zi           int // the zone's index in Zones()
	pairs        []*ebPair
	p0, sMean    atomic.Uint64 // float64 bits
	sMax         atomic.Uint64
	aggregateSet atomic.Bool
}

// ebChangeStat is what the subscribers saw of one change.
type ebChangeStat struct{ delivered, within5, shed, overtaken atomic.Int32 }

// ebTracker matches what the subscribers see against the churn.
type ebTracker struct {
	churn  *Churn
	window time.Duration // the services' shift_back
	epOf   map[netip.Addr]int32
	svcEPs map[string][]int32       // by assignment name: churned endpoints
	posOf  map[string]map[int32]int // by assignment name: endpoint → its index in svcEPs
	subs   []*ebSub
	hist   [2][3][]latHist // by kind, by subscriber's zone (its server), by second of commit
	stats  []ebChangeStat  // by change id
	// matching is on until the undo: after it, weights are scaled by
	// the zone's share and no longer name an admission.
	matching  atomic.Bool
	undoStart atomic.Int64 // since the epoch; 0 before the undo
	lastSeen  atomic.Int64 // since the epoch: the last delivery matched
	pairsSeen atomic.Int64
	pairsFull atomic.Int64
	// Counts of what the subscribers saw.
	beforeReply, shed, overtaken, unexplained, wentBack, notOwn atomic.Int64
	rampOver                                                    atomic.Int64

	mu         sync.Mutex
	rampExcess float64 // the most a share was seen above the cap
	rampFirst  string
	oddities   []string // the first views that went back or that no change explains
}

// oddity records one view that went back or that no change explains,
// for the report (the first 8).
func (tr *ebTracker) oddity(what string, p *ebPair, ep int32, st ebEPState, in bool, tag int32, v ebView, now time.Duration) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.oddities) >= 12 {
		return
	}
	var kinds []string
	for _, id := range tr.churn.Of(int(ep)) {
		c := tr.churn.Change(id)
		kinds = append(kinds, fmt.Sprintf("%c%d@%.2f-%.2f", c.Kind.String()[0], c.Gen, c.Start().Seconds(), c.Commit().Seconds()))
	}
	tr.oddities = append(tr.oddities, fmt.Sprintf("%s at %.2f s: %s %s, seen in=%v tag %d, held present=%v tag %d cursor %d; view: %d priorities, max weight %d; changes %v",
		what, now.Seconds(), p.name, tr.churn.Instances[ep].ID, in, tag, st.present, st.tag, st.cursor, v.prios, v.maxW, kinds))
}

// newEBTracker indexes the churn's endpoints by address and by service;
// secs is how many seconds of commits the histograms cover.
func newEBTracker(churn *Churn, window time.Duration, subs int, secs int) *ebTracker {
	tr := &ebTracker{churn: churn, window: window, epOf: map[netip.Addr]int32{}, svcEPs: map[string][]int32{},
		posOf: map[string]map[int32]int{}, stats: make([]ebChangeStat, churn.Cap())}
	for i, in := range churn.Instances {
		tr.epOf[netip.MustParseAddr(in.Addr)] = int32(i)
		name := AssignmentName(ServiceSpec{Name: in.Name})
		if tr.posOf[name] == nil {
			tr.posOf[name] = map[int32]int{}
		}
		tr.posOf[name][int32(i)] = len(tr.svcEPs[name])
		tr.svcEPs[name] = append(tr.svcEPs[name], int32(i))
	}
	for k := range tr.hist {
		for z := range tr.hist[k] {
			tr.hist[k][z] = make([]latHist, secs)
		}
	}
	tr.subs = make([]*ebSub, subs)
	tr.matching.Store(true)
	return tr
}

// decode reads an assignment: the churned endpoints in rotation, and
// the evacuated zone's endpoints, placement and share of priority 0.
func (tr *ebTracker) decode(cla *endpointv3.ClusterLoadAssignment) (ebView, error) {
	v := ebView{byEP: map[int32]ebObs{}, place: xdstest.ZonePlacement(cla, ebZone)}
	var p0, p0Zone float64
	for _, l := range cla.GetEndpoints() {
		zone := l.GetLocality().GetZone() == ebZone
		for _, lb := range l.GetLbEndpoints() {
			if h := lb.GetHealthStatus(); h != corev3.HealthStatus_HEALTHY && h != corev3.HealthStatus_UNKNOWN {
				continue
			}
			a, err := netip.ParseAddr(lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			if err != nil {
				return ebView{}, err
			}
			w := lb.GetLoadBalancingWeight().GetValue()
			v.maxW = max(v.maxW, w)
			v.others = v.others || !zone
			ep, churned := tr.epOf[a]
			if churned {
				v.byEP[ep] = ebObs{weight: w}
			} else {
				ep = -1
			}
			if zone {
				v.zone = append(v.zone, ebZoneEP{ep: ep, weight: w, evacuated: xdstest.Evacuated(lb)})
			}
			if l.GetPriority() == 0 {
				p0 += float64(w)
				if zone {
					p0Zone += float64(w)
				}
			}
		}
	}
	if p0 > 0 {
		v.p0 = p0Zone / p0
	}
	for _, l := range cla.GetEndpoints() {
		v.prios = max(v.prios, int(l.GetPriority())+1)
	}
	return v, nil
}

// subscriber sets up subscriber s's record.
func (tr *ebTracker) subscriber(s *Subscriber) {
	es := &ebSub{zone: s.Zone, zi: slices.Index(Zones(), s.Zone)}
	for _, svc := range s.Services {
		name := AssignmentName(svc)
		p := &ebPair{name: name, eps: make([]ebEPState, len(tr.svcEPs[name])), fullAt: -1}
		for k := range p.eps {
			p.eps[k] = ebEPState{cursor: -1, present: true}
		}
		es.pairs = append(es.pairs, p)
	}
	tr.subs[s.ID] = es
}

// received takes in an assignment subscriber s was sent at `at`.
func (tr *ebTracker) received(s *Subscriber, wi int, v ebView, at time.Time) {
	es := tr.subs[s.ID]
	p := es.pairs[wi]
	now := at.Sub(tr.churn.Epoch)
	if !p.seen {
		p.seen = true
		tr.pairsSeen.Add(1)
	}
	if tr.matching.Load() {
		tr.match(es.zi, p, v, now)
	}
	if v.place != p.place {
		p.moves = append(p.moves, ebMove{at: now, to: v.place})
		p.place = v.place
	}
	p.p0, p.others = v.p0, v.others
	// The zone's published share, from its endpoints' weights over their
	// base weight: exact for a subscriber of another zone, whose views
	// hold the zone in a priority of its own (unmerged); a subscriber of
	// the zone has it merged with the next tier as it returns, and its
	// share of the load is p0.
	full := true
	if es.zone != ebZone {
		p.s = 0
		for _, z := range v.zone {
			base := float64(ChurnWeight(0))
			if z.ep >= 0 {
				base = float64(ChurnWeight(int(p.eps[tr.posOf[p.name][z.ep]].tag)))
			}
			sh := 0.0
			if !z.evacuated {
				sh = float64(z.weight) / base
			}
			p.s = max(p.s, sh)
			full = full && !z.evacuated && float64(z.weight) == base
		}
		full = full && len(v.zone) > 0
	} else {
		full = v.p0 >= 0.999
	}
	if u := tr.undoStart.Load(); u > 0 && now > time.Duration(u) {
		tr.checkRamp(es.zone, p, now-time.Duration(u))
		if full && p.fullAt < 0 {
			p.fullAt = now
			tr.pairsFull.Add(1)
		}
	}
	tr.aggregate(es)
}

// rampCap is the most share SPEC §6's rate-capped shift-back allows t
// after the undo: a tenth at once and a tenth more every window/10
// (wire.Evacuation.Share), counted from the undo's call, which is no
// later than its commit.
func rampCap(t, window time.Duration) float64 {
	if window <= 0 {
		return 1
	}
	step := math.Floor(float64(wire.EvacuationSteps)*float64(t)/float64(window)) + 1
	return min(1, step/wire.EvacuationSteps)
}

// checkRamp checks a pair's view t into the return against the cap: a
// subscriber of another zone, the zone's share of its endpoints'
// weights (rounded to whole weights: 0.006 of slack); a subscriber of
// the zone, the zone's share of its load, min(1, 1.4 × share) at most
// (its tier takes 1.4 × its healthy fraction, decisions.md).
func (tr *ebTracker) checkRamp(zone string, p *ebPair, t time.Duration) {
	c := rampCap(t, tr.window)
	got, limit := p.s, c+0.006
	if zone == ebZone {
		if !p.others {
			return // nothing outside the zone to take the load
		}
		got, limit = p.p0, min(1, 1.4*c)+0.01
	}
	if got <= limit {
		return
	}
	tr.rampOver.Add(1)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if got-limit > tr.rampExcess {
		tr.rampExcess = got - limit
		tr.rampFirst = p.name + " from zone " + zone
	}
}

// aggregate publishes a subscriber's shares for the sampler.
func (tr *ebTracker) aggregate(es *ebSub) {
	var p0, sSum, sMax float64
	n, nOthers := 0, 0
	for _, p := range es.pairs {
		if !p.seen {
			continue
		}
		n++
		if p.others {
			p0 += p.p0
			nOthers++
		}
		sSum += p.s
		sMax = max(sMax, p.s)
	}
	if n == 0 {
		return
	}
	es.p0.Store(math.Float64bits(p0 / float64(max(nOthers, 1))))
	es.sMean.Store(math.Float64bits(sSum / float64(n)))
	es.sMax.Store(math.Float64bits(sMax))
	es.aggregateSet.Store(true)
}

// match accounts for the churned endpoints of p's service whose state in
// v differs from the last the subscriber saw: an endpoint gone is the
// next withdrawal; one in rotation is the admission its weight names
// (ChurnWeight), the admissions before it shed and the withdrawals
// before it overtaken (never seen).
func (tr *ebTracker) match(zi int, p *ebPair, v ebView, now time.Duration) {
	for k, ep := range tr.svcEPs[p.name] {
		st := &p.eps[k]
		o, in := v.byEP[ep]
		tag := int32(o.weight) - int32(ChurnWeight(0))
		if in == st.present && (!in || tag == st.tag) {
			continue
		}
		if in && tag < 0 {
			// In rotation at a weight no admission was given: not yet
			// its own (see the report's note); the admission is seen
			// once its weight is.
			if tr.notOwn.Add(1) <= 3 {
				tr.oddity("weight not its own", p, ep, *st, in, tag, v, now)
			}
			continue
		}
		ids := tr.churn.Of(int(ep))
		j := int(st.cursor) + 1
		for ; j < len(ids); j++ {
			c := tr.churn.Change(ids[j])
			if !in && c.Kind == Withdrawal || in && c.Kind == Admission && c.Gen == tag {
				break
			}
		}
		switch {
		case j < len(ids):
			for x := int(st.cursor) + 1; x < j; x++ {
				if tr.churn.Change(ids[x]).Kind == Admission {
					tr.stats[ids[x]].shed.Add(1)
					tr.shed.Add(1)
				} else {
					tr.stats[ids[x]].overtaken.Add(1)
					tr.overtaken.Add(1)
				}
			}
			tr.deliver(zi, ids[j], now)
			st.cursor = int32(j)
		case in && tag < st.tag:
			tr.wentBack.Add(1)
			tr.oddity("went back", p, ep, *st, in, tag, v, now)
		default:
			tr.unexplained.Add(1)
			tr.oddity("unexplained", p, ep, *st, in, tag, v, now)
		}
		st.present = in
		if in {
			st.tag = tag
		}
	}
}

// deliver records change id as seen at now: its latency from the API's
// reply (0 when seen before it).
func (tr *ebTracker) deliver(zi int, id int32, now time.Duration) {
	c := tr.churn.Change(id)
	commit := c.Commit()
	lat := now - commit
	at := commit
	if commit == 0 || lat < 0 {
		lat, at = 0, c.Start()
		tr.beforeReply.Add(1)
	}
	h := tr.hist[c.Kind][zi]
	h[min(int(at/time.Second), len(h)-1)].add(lat)
	st := &tr.stats[id]
	st.delivered.Add(1)
	if lat <= 5*time.Second {
		st.within5.Add(1)
	}
	tr.lastSeen.Store(int64(now))
}
