package store

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/cairn-sd/cairn/wire"
)

// trail is the audit trail: the events of each namespace in a queue of
// their own, oldest first, and at most capacity events over all of them.
// When a push finds it full, the namespace that holds the most events
// loses its oldest (of two that hold as many, the one whose name sorts
// last). So a namespace that churns pushes out its own history first,
// and one that holds no more than its share (capacity over the
// namespaces that have events) never loses an event to another's.
// Events of no namespace (evacuations of a zone, the cluster's own)
// share a queue like a namespace's. Every choice depends only on the
// events pushed, never on a map's order, so every replica keeps the same
// trail.
type trail struct {
	capacity int
	total    int
	byNS     map[string]*nsQueue
	largest  queueHeap // the queues that hold an event, most first
}

// nsQueue is one namespace's events, oldest first: live from start.
type nsQueue struct {
	ns    string
	buf   []wire.Event
	start int
	index int // in trail.largest
}

func (q *nsQueue) len() int { return len(q.buf) - q.start }

// popOldest drops the queue's oldest event, and gives its memory back
// once the dropped half outweighs the live one.
func (q *nsQueue) popOldest() {
	q.buf[q.start] = wire.Event{}
	q.start++
	if q.start >= 64 && q.start*2 >= len(q.buf) {
		q.buf = append(make([]wire.Event, 0, q.len()*2), q.buf[q.start:]...)
		q.start = 0
	}
}

func newTrail(capacity int) trail {
	return trail{capacity: capacity, byNS: map[string]*nsQueue{}}
}

func (t *trail) push(e wire.Event) {
	if t.capacity <= 0 {
		return
	}
	if t.total == t.capacity {
		q := t.largest[0]
		q.popOldest()
		t.total--
		if q.len() == 0 {
			heap.Remove(&t.largest, q.index)
			delete(t.byNS, q.ns)
		} else {
			heap.Fix(&t.largest, q.index)
		}
	}
	q := t.byNS[e.Namespace]
	if q == nil {
		q = &nsQueue{ns: e.Namespace}
		t.byNS[e.Namespace] = q
		heap.Push(&t.largest, q)
	}
	q.buf = append(q.buf, e)
	t.total++
	heap.Fix(&t.largest, q.index)
}

func (t *trail) len() int { return t.total }

// namespace returns the events of namespace ns, oldest first; the slice
// is the trail's own, to read under the lock that guards it.
func (t *trail) namespace(ns string) []wire.Event {
	if q := t.byNS[ns]; q != nil {
		return q.buf[q.start:]
	}
	return nil
}

// list returns every event, oldest first (by sequence number).
func (t *trail) list() []wire.Event {
	out := make([]wire.Event, 0, t.total)
	for _, q := range t.byNS {
		out = append(out, q.buf[q.start:]...)
	}
	slices.SortFunc(out, func(a, b wire.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// queueHeap orders queues by how many events they hold, most first; of
// two equal, the greater name first.
type queueHeap []*nsQueue

func (h queueHeap) Len() int { return len(h) }
func (h queueHeap) Less(i, j int) bool {
	if a, b := h[i].len(), h[j].len(); a != b {
		return a > b
	}
	return h[i].ns > h[j].ns
}
func (h queueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *queueHeap) Push(x any) {
	q := x.(*nsQueue)
	q.index = len(*h)
	*h = append(*h, q)
}
func (h *queueHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return q
}
