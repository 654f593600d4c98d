package history

import (
	"container/heap"
	"encoding/binary"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// service is one service's recorded history: its id (which the
// namespace's steps name it by), its base (the state its part of those
// steps starts from), and its definitions.
type service struct {
	key, ns string
	id      uint32 // its index in History.ids, from 1
	log     *nsLog // its namespace's
	// base is the state after every step let go that changed it: each
	// slot's member. baseAt, baseVersion and baseRevision are those of
	// the last such step; zero while none was (the history of the
	// service starts at its first step).
	base                      map[uint32]member
	baseAt                    time.Time
	baseVersion, baseRevision uint64
	steps                     int // live steps that change it
	// first and firstRevision are the time and revision of the first
	// step that changed it, the start of its history while no step that
	// changed it was let go.
	first         time.Time
	firstRevision uint64
	infos         []infoStep
	gen           uint64 // History.gen when a table last named it
	// pass is History.pass when a walk of a step (touching) last met it,
	// and passTo the map that walk applies its changes to.
	pass   uint64
	passTo map[uint32]member
}

// nsLog is one namespace's steps, oldest first: live from start.
type nsLog struct {
	ns    string
	steps []step
	start int
	held  int // bytes of the live steps (cost)
	index int // in History.largestNS
	// The changes of the table being recorded: encoded (delta.go, each
	// after its service's id), with the instances they name.
	pending      []byte
	pendingInfos []*status.InstanceInfo
}

func (l *nsLog) live() []step { return l.steps[l.start:] }

// step is one table's changes to one namespace's services: built at
// nanos (Unix nanoseconds: 8 bytes where a time.Time takes 24), its
// changes encoded in data (each the service's id, then the change,
// delta.go), the instances they name in infos. One step a table and
// namespace, not a service: a slow start that raises the weights of
// 2,500 services in one table is one step.
type step struct {
	nanos             int64
	version, revision uint64
	data              []byte
	infos             []*status.InstanceInfo
}

func (st *step) time() time.Time { return time.Unix(0, st.nanos).UTC() }

// stepOverhead is what a step costs beside its data and instances: the
// step in its namespace's slice.
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

func newService(key string, id uint32, log func(ns string) *nsLog) *service {
	ns, _, _ := strings.Cut(key, "/")
	return &service{key: key, ns: ns, id: id, log: log(ns), base: map[uint32]member{}}
}

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

// log returns namespace ns's log, made on first sight.
func (h *History) log(ns string) *nsLog {
	l := h.logs[ns]
	if l == nil {
		l = &nsLog{ns: ns, index: -1}
		h.logs[ns] = l
	}
	return l
}

// add appends a step to namespace ns's log, and counts its bytes and
// the services it changes.
func (h *History) add(l *nsLog, st step) {
	l.steps = append(l.steps, st)
	n := st.cost()
	l.held += n
	h.held += n
	h.touching(&st, func(s *service) map[uint32]member {
		s.steps++
		if s.first.IsZero() {
			s.first, s.firstRevision = st.time(), st.revision
		}
		return nil
	})
	if l.index < 0 {
		heap.Push(&h.largestNS, l)
	}
	heap.Fix(&h.largestNS, l.index)
}

// touching walks st's changes, calling f once for each service it
// changes (its changes are in slot order, so a service's need not be
// together) and applying them to the map f returns (nil: none).
func (h *History) touching(st *step, f func(*service) map[uint32]member) {
	h.pass++
	_ = st.each(func(id uint32) map[uint32]member { // made here, or checked when read from the file
		s := h.byID(id)
		if s == nil {
			return nil
		}
		if s.pass != h.pass {
			s.pass, s.passTo = h.pass, f(s)
		}
		return s.passTo
	}, nil)
}

// byID returns the service with id, or nil.
func (h *History) byID(id uint32) *service {
	if int(id) < len(h.ids) {
		return h.ids[id]
	}
	return nil
}

// fold lets l's oldest step go, into its services' bases.
func (h *History) fold(l *nsLog, why string) {
	st := l.steps[l.start]
	l.steps[l.start] = step{}
	l.start++
	if l.start >= 64 && l.start*2 >= len(l.steps) {
		l.steps = append(make([]step, 0, 2*(len(l.steps)-l.start)), l.steps[l.start:]...)
		l.start = 0
	}
	at := st.time()
	h.touching(&st, func(s *service) map[uint32]member {
		s.steps--
		s.baseAt, s.baseVersion, s.baseRevision = at, st.version, st.revision
		return s.base
	})
	n := st.cost()
	l.held -= n
	h.held -= n
	if len(l.live()) == 0 {
		heap.Remove(&h.largestNS, l.index)
		l.index = -1
	} else {
		heap.Fix(&h.largestNS, l.index)
	}
	h.m.folded.WithLabelValues(why).Inc()
}

// trim lets go the steps past the bounds (see the package's doc), and
// forgets the services that hold nothing any more.
func (h *History) trim(now time.Time) {
	horizon := now.Add(-h.cfg.Window)
	for _, l := range h.logs {
		for len(l.live()) > h.cfg.Changes && l.live()[0].nanos < horizon.UnixNano() {
			h.fold(l, "window")
		}
	}
	for h.held > h.cfg.Bytes && len(h.largestNS) > 0 {
		h.fold(h.largestNS[0], "memory")
	}
	for key, s := range h.services {
		if s.steps == 0 && len(s.base) == 0 && s.baseAt.Before(horizon) && !h.current(s) {
			delete(h.services, key)
			h.ids[s.id] = nil
		}
	}
	if len(h.fresh) > 1 && (len(h.fresh) > maxFresh || h.fresh[1].at.Before(horizon)) {
		h.fresh = h.fresh[1:]
	}
}

// current reports whether the last table recorded names s.
func (h *History) current(s *service) bool { return s.gen == h.gen }

// appendServiceChange encodes a change of service id onto b: the id,
// then the change (appendChange).
func appendServiceChange(b []byte, id, slot uint32, old, e status.Entry, gone, info bool) []byte {
	b = binary.AppendUvarint(b, uint64(id))
	return appendChange(b, slot, old, e, gone, info)
}

// nsHeap orders namespaces by the bytes they hold, most first; of two
// equal, the greater name first.
type nsHeap []*nsLog

func (q nsHeap) Len() int { return len(q) }
func (q nsHeap) Less(i, j int) bool {
	if q[i].held != q[j].held {
		return q[i].held > q[j].held
	}
	return q[i].ns > q[j].ns
}
func (q nsHeap) Swap(i, j int) { q[i], q[j] = q[j], q[i]; q[i].index, q[j].index = i, j }
func (q *nsHeap) Push(x any) {
	n := x.(*nsLog)
	n.index = len(*q)
	*q = append(*q, n)
}
func (q *nsHeap) Pop() any {
	old := *q
	n := old[len(old)-1]
	old[len(old)-1] = nil
	n.index = -1
	*q = old[:len(old)-1]
	return n
}
