package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/cairn-sd/cairn/bench/xdssub"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// change is one withdrawal (port 0) or admission. The driver sets svc,
// ep and port before the change enters the log; subscribers read only
// those. The times are read once the run is over.
type change struct {
	svc, ep       int32
	port          uint16
	failed        bool
	start, commit time.Duration // since the run's epoch: the API call made and returned
}

// changeLog holds the changes, and each endpoint's in order.
type changeLog struct {
	changes []change // by id; preallocated, so that it never moves
	mu      []sync.RWMutex
	byEP    [][][]int32 // by service, by endpoint: change ids, oldest first
	n       atomic.Int32
}

func newChangeLog(o options, capacity int) *changeLog {
	l := &changeLog{changes: make([]change, capacity), mu: make([]sync.RWMutex, o.services), byEP: make([][][]int32, o.services)}
	for s := range l.byEP {
		l.byEP[s] = make([][]int32, o.endpoints)
	}
	return l
}

// add enters a change in the log and returns its id; false when the log
// is full.
func (l *changeLog) add(svc, ep int, port uint16) (int32, bool) {
	id := l.n.Load()
	if int(id) >= len(l.changes) {
		return 0, false
	}
	l.changes[id] = change{svc: int32(svc), ep: int32(ep), port: port}
	l.n.Store(id + 1) // one writer: the driver
	l.mu[svc].Lock()
	l.byEP[svc][ep] = append(l.byEP[svc][ep], id)
	l.mu[svc].Unlock()
	return id, true
}

func (l *changeLog) of(svc, ep int) []int32 {
	l.mu[svc].RLock()
	defer l.mu[svc].RUnlock()
	return l.byEP[svc][ep]
}

// delivery is one change seen by one subscriber, at a time since the
// run's epoch, or one it never saw: shed or moot.
type delivery struct {
	id int32
	at time.Duration
}

const (
	// shed: a later change of the endpoint overtook this one before the
	// subscriber saw it.
	shed time.Duration = -1
	// moot: a withdrawal of an admission the subscriber never saw (shed):
	// its view never had the endpoint back, so there was nothing to
	// withdraw from it.
	moot time.Duration = -2
)

// subscriber is one delta stream and what it has seen.
type subscriber struct {
	id    int
	watch []int     // services
	names []string  // their assignment names
	pos   [][]int32 // by watch index, by endpoint: the index in the endpoint's log of the last change seen; -1: none
	// Only the stream's goroutine touches these until the run is over.
	// tally counts its deliveries and sheds: the world's seen for the
	// simulated subscribers, the fleet's for Envoys.
	tally      *atomic.Int64
	deliveries []delivery
	// zone is where the last assignment of each watched service (by
	// watch index) put the evacuated zone; zoneMoves its changes once
	// the world is tracking.
	zone             []xdstest.Placement
	zoneMoves        []zoneMove
	admitted         time.Duration
	ok               bool
	failedAfterAdmit bool
}

// ports is a decoded assignment's endpoints: each endpoint's port in
// rotation, 0 when it is not.
type ports []uint16

// assignment is a decoded assignment: its endpoints, and where it puts
// the zone -evacuate-at evacuates (zoneNone when there is none).
type assignment struct {
	ports ports
	zone  xdstest.Placement
}

// newDecoder decodes assignments, once per name and version.
func newDecoder(o options) *xdstest.Decoder[assignment] {
	return xdstest.NewDecoder(func(r *discoveryv3.Resource) (assignment, error) {
		cla, err := xdstest.DecodeAssignment(r)
		if err != nil {
			return assignment{}, err
		}
		out := make(ports, o.endpoints)
		for _, ap := range xdstest.InRotation(cla) {
			b := ap.Addr().As4()
			if ep := int(b[3]) - 1; ep >= 0 && ep < o.endpoints && ap.Addr().Is4() {
				out[ep] = ap.Port()
			}
		}
		a := assignment{ports: out}
		if o.evacuateAt > 0 {
			a.zone = xdstest.ZonePlacement(cla, o.evacZone)
		}
		return a, nil
	})
}

// world is what the streams share.
type world struct {
	o        options
	log      *changeLog
	dec      *xdstest.Decoder[assignment]
	svcOf    map[string]int // assignment name → service
	epoch    time.Time
	streams  int64
	admitted atomic.Int64
	allIn    chan struct{} // closed when every stream has its first answer
	// seen counts deliveries and sheds, for the wait after the changes.
	seen atomic.Int64
	// tracking is set once the evacuation is asked for: from then on
	// the subscribers record where their views put its zone.
	tracking atomic.Bool
	// evac and undo are the evacuation's calls, set once the changes
	// are over.
	evac, undo evacCall
}

func (w *world) now() time.Duration { return time.Since(w.epoch) }

// run opens s's stream on cc (retrying, with jitter, until deadline:
// xdssub.Open) and follows it until ctx is done.
func (w *world) run(ctx context.Context, cc grpc.ClientConnInterface, s *subscriber, deadline time.Time) {
	rng := rand.New(rand.NewPCG(uint64(s.id), 7))
	node := &corev3.Node{Id: fmt.Sprintf("xdsload-%d", s.id), Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"}}
	sess, err := xdssub.Open(ctx, cc, xdssub.Request{Node: node, Type: resourcev3.EndpointType, Names: s.names},
		xdssub.Retry{Min: 100 * time.Millisecond, Max: 5 * time.Second, Deadline: deadline}, rng, nil)
	if err != nil {
		return
	}
	defer sess.Close()
	st, resp := sess.Stream, sess.First
	s.admitted, s.ok = w.now(), true
	if w.admitted.Add(1) == w.streams {
		close(w.allIn)
	}
	for {
		s.observe(w, resp, w.now())
		if err := st.Ack(resp); err != nil {
			s.failedAfterAdmit = ctx.Err() == nil
			return
		}
		var err error
		if resp, err = st.Recv(); err != nil {
			s.failedAfterAdmit = ctx.Err() == nil
			return
		}
	}
}

// observe matches a response received at `at` against the changes of
// the endpoints it shows.
func (s *subscriber) observe(w *world, resp *discoveryv3.DeltaDiscoveryResponse, at time.Duration) {
	for _, r := range resp.Resources {
		svc, ok := w.svcOf[r.Name]
		if !ok {
			continue
		}
		wi := -1
		for i, v := range s.watch {
			if v == svc {
				wi = i
				break
			}
		}
		if wi < 0 {
			continue
		}
		got, err := w.dec.Decode(r)
		if err != nil {
			continue
		}
		s.see(w, svc, wi, got.ports, at)
		s.track(w, wi, got.zone, at)
	}
}

// see matches the assignment of service svc (index wi of s.watch), as
// decoded, against the changes of its endpoints.
func (s *subscriber) see(w *world, svc, wi int, got ports, at time.Duration) {
	for ep, port := range got {
		ids := w.log.of(svc, ep)
		p := s.pos[wi][ep]
		if int(p)+1 >= len(ids) {
			continue // nothing pending
		}
		if port != 0 {
			// In rotation on port: the admission that used it, and
			// every earlier pending change it overtook.
			for j := int(p) + 1; j < len(ids); j++ {
				if w.log.changes[ids[j]].port != port {
					continue
				}
				s.skip(w, ids, int(p), j)
				s.deliveries = append(s.deliveries, delivery{id: ids[j], at: at})
				s.tally.Add(1)
				s.pos[wi][ep] = int32(j)
				break
			}
			continue
		}
		// Out of rotation, last seen in: the next change, a
		// withdrawal, is delivered (a later one, after an
		// admission this subscriber never saw, cannot be told
		// from it and stays pending).
		if p >= 0 && w.log.changes[ids[p]].port == 0 {
			continue
		}
		if next := ids[p+1]; w.log.changes[next].port == 0 {
			s.deliveries = append(s.deliveries, delivery{id: next, at: at})
			s.tally.Add(1)
			s.pos[wi][ep] = p + 1
		}
	}
}

// skip records that the subscriber never saw the changes of one
// endpoint between the last it saw (index p in the endpoint's log ids)
// and the one at j: each was shed, or, a withdrawal after a shed
// admission, moot.
func (s *subscriber) skip(w *world, ids []int32, p, j int) {
	prevShedAdmission := false
	for i := p + 1; i < j; i++ {
		at := shed
		if w.log.changes[ids[i]].port == 0 && prevShedAdmission {
			at = moot
		}
		prevShedAdmission = w.log.changes[ids[i]].port != 0
		s.deliveries = append(s.deliveries, delivery{id: ids[i], at: at})
		s.tally.Add(1)
	}
}

// settle closes the accounts of a subscriber whose stream has ended:
// where it last saw an endpoint out of rotation and the endpoint's last
// change was a withdrawal, the admissions since were shed and the
// withdrawals after them moot (its view matches the endpoint's state).
// Other pending changes stay never delivered.
func (s *subscriber) settle(w *world) {
	for wi, svc := range s.watch {
		for ep := range s.pos[wi] {
			ids := w.log.of(svc, ep)
			p := int(s.pos[wi][ep])
			if p+1 >= len(ids) || p < 0 || w.log.changes[ids[p]].port != 0 {
				continue
			}
			last := len(ids) - 1
			if c := w.log.changes[ids[last]]; c.port != 0 || c.failed {
				continue
			}
			s.skip(w, ids, p, last+1)
			s.pos[wi][ep] = int32(last)
		}
	}
}

// newSubscribers picks each subscriber's services, and returns them with
// the subscribers watching each service.
func newSubscribers(o options, rng *rand.Rand) ([]*subscriber, [][]int) {
	subs := make([]*subscriber, o.streams)
	watchers := make([][]int, o.services)
	for i := range subs {
		s := &subscriber{id: i, zone: make([]xdstest.Placement, o.watch)}
		for _, svc := range rng.Perm(o.services)[:o.watch] {
			s.watch = append(s.watch, svc)
			s.names = append(s.names, resourceName(svc))
			p := make([]int32, o.endpoints)
			for e := range p {
				p[e] = -1
			}
			s.pos = append(s.pos, p)
			watchers[svc] = append(watchers[svc], i)
		}
		subs[i] = s
	}
	return subs, watchers
}
