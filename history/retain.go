package history

import (
	"container/heap"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// service is one service's recorded history: its base, the state its
// steps start from, then its steps, oldest first.
type service struct {
	key, ns string
	// base is the state after every step let go: each slot's member.
	// baseAt, baseVersion and baseRevision are those of the last step
	// folded into it; zero while none was (the history starts at the
	// first step).
	base                      map[uint32]member
	baseAt                    time.Time
	baseVersion, baseRevision uint64
	steps                     []step // live from start
	start                     int
	held                      int // bytes of the live steps (cost)
	infos                     []infoStep
	// The changes of the table being recorded: encoded (delta.go), with
	// the instances they name.
	pending      []byte
	pendingInfos []*status.InstanceInfo
	gen          uint64 // History.gen when a table last named it
	index        int    // in its namespace's svcHeap; -1: not in it
}

// step is one table that changed the service's entries: built at nanos
// (Unix nanoseconds: 8 bytes where a time.Time takes 24), its changes
// encoded in data (delta.go), the instances they name in infos.
type step struct {
	nanos             int64
	version, revision uint64
	data              []byte
	infos             []*status.InstanceInfo
}

func (st *step) time() time.Time { return time.Unix(0, st.nanos).UTC() }

// stepOverhead is what a step costs beside its data and instances: the
// step in its service's slice.
const stepOverhead = 72

// cost is the memory the step holds, as the bounds count it. The
// instances are the directory's while they are registered, and counted
// as pointers.
func (st *step) cost() int { return stepOverhead + cap(st.data) + 8*cap(st.infos) }

// member is a slot's state: its entry and its instance.
type member struct {
	entry status.Entry
	info  *status.InstanceInfo
}

// infoStep is a definition of the service, from the table built at at.
type infoStep struct {
	at   time.Time
	info status.ServiceInfo
}

// nsHeld counts the bytes a namespace's services hold, and orders
// those that hold any, most first.
type nsHeld struct {
	ns       string
	held     int
	services svcHeap
	index    int // in History.largestNS
}

func newService(key string) *service {
	ns, _, _ := strings.Cut(key, "/")
	return &service{key: key, ns: ns, base: map[uint32]member{}, index: -1}
}

func (s *service) live() []step { return s.steps[s.start:] }

// info returns the service's latest definition.
func (s *service) info() status.ServiceInfo {
	if len(s.infos) == 0 {
		return status.ServiceInfo{}
	}
	return s.infos[len(s.infos)-1].info
}

// infoAt returns the definition in force at t: the latest from a table
// built by then, or the oldest kept.
func (s *service) infoAt(t time.Time) status.ServiceInfo {
	for i := len(s.infos) - 1; i >= 0; i-- {
		if !s.infos[i].at.After(t) {
			return s.infos[i].info
		}
	}
	if len(s.infos) > 0 {
		return s.infos[0].info
	}
	return status.ServiceInfo{}
}

// add appends a step to s, and counts its bytes.
func (h *History) add(s *service, st step) {
	s.steps = append(s.steps, st)
	n := st.cost()
	s.held += n
	h.held += n
	nh := h.byNS[s.ns]
	if nh == nil {
		nh = &nsHeld{ns: s.ns}
		h.byNS[s.ns] = nh
		heap.Push(&h.largestNS, nh)
	}
	nh.held += n
	if s.index < 0 {
		heap.Push(&nh.services, s)
	}
	heap.Fix(&nh.services, s.index)
	heap.Fix(&h.largestNS, nh.index)
}

// fold lets s's oldest step go, into its base.
func (h *History) fold(s *service, why string) {
	st := s.steps[s.start]
	s.steps[s.start] = step{}
	s.start++
	if s.start >= 64 && s.start*2 >= len(s.steps) {
		s.steps = append(make([]step, 0, 2*(len(s.steps)-s.start)), s.steps[s.start:]...)
		s.start = 0
	}
	_ = st.each(s.base, nil) // made here, or checked when read from the file
	s.baseAt, s.baseVersion, s.baseRevision = st.time(), st.version, st.revision
	n := st.cost()
	s.held -= n
	h.held -= n
	if nh := h.byNS[s.ns]; nh != nil {
		nh.held -= n
		switch {
		case s.index < 0:
		case s.held == 0:
			heap.Remove(&nh.services, s.index)
		default:
			heap.Fix(&nh.services, s.index)
		}
		if len(nh.services) == 0 {
			heap.Remove(&h.largestNS, nh.index)
			delete(h.byNS, s.ns)
		} else {
			heap.Fix(&h.largestNS, nh.index)
		}
	}
	h.m.folded.WithLabelValues(why).Inc()
}

// trim lets go the steps past the bounds (see the package's doc), and
// forgets the services that hold nothing any more.
func (h *History) trim(now time.Time) {
	horizon := now.Add(-h.cfg.Window)
	for key, s := range h.services {
		for len(s.live()) > h.cfg.Changes && s.live()[0].nanos < horizon.UnixNano() {
			h.fold(s, "window")
		}
		if len(s.live()) == 0 && len(s.base) == 0 && s.baseAt.Before(horizon) && !h.current(s) {
			delete(h.services, key)
		}
	}
	for h.held > h.cfg.Bytes {
		h.fold(h.largest(), "memory")
	}
	if len(h.fresh) > 1 && (len(h.fresh) > maxFresh || h.fresh[1].at.Before(horizon)) {
		h.fresh = h.fresh[1:]
	}
}

// current reports whether the last table recorded names s.
func (h *History) current(s *service) bool { return s.gen == h.gen }

// largest returns the service to lose a step: of the namespace holding
// the most bytes, the service holding the most (ties: the greater
// name, so that every node picks alike).
func (h *History) largest() *service { return h.largestNS[0].services[0] }

// nsHeap orders namespaces by the bytes they hold, most first; of two
// equal, the greater name first.
type nsHeap []*nsHeld

func (q nsHeap) Len() int { return len(q) }
func (q nsHeap) Less(i, j int) bool {
	if q[i].held != q[j].held {
		return q[i].held > q[j].held
	}
	return q[i].ns > q[j].ns
}
func (q nsHeap) Swap(i, j int) { q[i], q[j] = q[j], q[i]; q[i].index, q[j].index = i, j }
func (q *nsHeap) Push(x any) {
	n := x.(*nsHeld)
	n.index = len(*q)
	*q = append(*q, n)
}
func (q *nsHeap) Pop() any {
	old := *q
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return n
}

// svcHeap orders a namespace's services by the bytes they hold, most
// first; of two equal, the greater key first.
type svcHeap []*service

func (q svcHeap) Len() int { return len(q) }
func (q svcHeap) Less(i, j int) bool {
	if q[i].held != q[j].held {
		return q[i].held > q[j].held
	}
	return q[i].key > q[j].key
}
func (q svcHeap) Swap(i, j int) { q[i], q[j] = q[j], q[i]; q[i].index, q[j].index = i, j }
func (q *svcHeap) Push(x any) {
	s := x.(*service)
	s.index = len(*q)
	*q = append(*q, s)
}
func (q *svcHeap) Pop() any {
	old := *q
	s := old[len(old)-1]
	old[len(old)-1] = nil
	s.index = -1
	*q = old[:len(old)-1]
	return s
}
