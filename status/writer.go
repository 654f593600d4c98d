package status

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// Writer is the one writer of a Publisher's tables: the server's
// publisher, fed by its store replica, and the agent's, fed by its
// views, both describe their services and instances to a Writer, which
// keeps what a table needs from one build to the next:
//
//   - each instance's slot (Slots), freed when it leaves the layout and
//     recycled once a table has written the slot empty;
//   - the service names (ids stable for as long as the Writer lives) and
//     the locality names (those in use, sorted);
//   - the Directory, made again only when a service's answer policy or
//     an instance's identity changed, and indexed before any reader
//     sees it; an unchanged instance keeps its *InstanceInfo, so readers
//     may cache by pointer;
//   - each slot's entry as the layout described it.
//
// A layout describes the services and their instances (Begin, Add for
// each instance, End); a Build publishes a table of it, every slot
// written whatever changed (constant work, see the package comment).
// A caller whose instances' state moves between layouts (verdicts
// committed, slow start rising) rewrites it in Build's fill instead of
// laying out again.
//
// A layout allocates nothing per instance that was in the previous one
// (a new instance gets its key and its InstanceInfo), and a Build
// nothing at all unless readers hold every spare table.
//
// A Writer belongs to one goroutine: none of its methods may be called
// concurrently. Readers read the Publisher.
type Writer struct {
	pub     *Publisher
	slots   *Slots
	step    func()
	dropped func(key string, err error)

	rev      uint64
	services *Names // extended, never shrunk: an id is stable
	locs     *Names // the localities in use, sorted
	dir      *Directory

	// Per slot, rewritten by each layout. What an entry holds beside
	// them comes from elsewhere at Build: its key's hash from slots, its
	// incarnation from infos, its service id from ids, its locality ids
	// from locIDs; state is the rest, kept small because it is one more
	// array of the table's capacity.
	refs  []Ref
	state []slotState
	pair  []int32 // index in pairs of the slot's (region, zone)
	infos []*InstanceInfo

	// The layout under way (Begin to End), its scratch kept for the next.
	infoSvc   []ServiceInfo // by layout index
	ids       []uint32      // by layout index: the service's id in services
	counts    []int32       // by layout index: instances added
	lastPorts []map[string]uint16
	pairs     []locPair
	pairIDs   map[locPair]int32
	locIDs    []locIDs // by index in pairs, set by End
	keyBuf    []byte
	fresh     bool // an InstanceInfo was made or moved in this layout
}

// WriterConfig configures a Writer. Every field is optional.
type WriterConfig struct {
	// Step, if set, is called between instances (in a layout) and
	// between slots (in a build and while indexing a Directory), for a
	// writer that paces its work so that a server on one core keeps
	// answering queries.
	Step func()
	// Dropped, if set, is called for each instance Add could not give a
	// slot (the table is full, or the key is empty), with its key and
	// the error. The instance is not published.
	Dropped func(key string, err error)
}

// Ref is an instance's place in the layout that laid it out: the index
// of its service in Begin's services, and its rank among the instances
// Add was given for that service (counting those it could not place).
type Ref struct{ Service, Instance int32 }

// Instance describes one instance to Add.
type Instance struct {
	// ID is the instance's id in its service: its key, the one KeyHash
	// takes, is "namespace/service/id".
	ID          string
	Incarnation uint64
	// Region and Zone are its locality ("" when not given).
	Region, Zone string
	// Info is the instance's identity and addresses, for a caller that
	// holds one ready; the writer copies it. nil: the writer makes one
	// from Addresses (parsed, canonical; those that do not parse are left
	// out) and Ports. Either is read only when the slot's InstanceInfo
	// cannot be kept: a new instance, a new incarnation, or (with Info)
	// other addresses or ports.
	Info      *InstanceInfo
	Addresses []string
	Ports     map[string]int
	// The state the entry starts from: what Build publishes unless its
	// fill says otherwise.
	Verdict            Verdict
	Lifecycle          Lifecycle
	Flags              Flags
	Weight, BaseWeight uint16
	Shift              uint8
}

type locPair struct{ region, zone string }

// slotState is the part of a slot's entry a layout takes from its
// Instance as given.
type slotState struct {
	weight, baseWeight uint16
	verdict            Verdict
	lifecycle          Lifecycle
	flags              Flags
	shift              uint8
}

// locIDs are a (region, zone) pair's ids in the layout's localities.
type locIDs struct{ region, zone uint16 }

// NewWriter returns the Writer of pub's tables, with Slots of their
// size. pub has one Writer: its tables' slots are the Writer's. When a
// layout holds more instances than the tables have slots, the Writer
// grows them (Publisher.Grow), doubling, up to the publisher's Capacity.
func NewWriter(pub *Publisher, cfg WriterConfig) *Writer {
	w := &Writer{pub: pub, slots: NewSlots(pub.Size()), step: cfg.Step, dropped: cfg.Dropped}
	if w.step == nil {
		w.step = func() {}
	}
	w.extendSlots(pub.Size())
	return w
}

// extendSlots lengthens the per-slot arrays to n, the new slots free.
func (w *Writer) extendSlots(n int) {
	old := len(w.refs)
	w.refs = slices.Grow(w.refs, n-old)[:n]
	for i := old; i < n; i++ {
		w.refs[i] = Ref{-1, -1}
	}
	w.state = append(w.state, make([]slotState, n-old)...)
	w.pair = append(w.pair, make([]int32, n-old)...)
	w.infos = append(w.infos, make([]*InstanceInfo, n-old)...)
}

// grow doubles the tables' slots, up to the publisher's Capacity,
// reporting whether there is more room.
func (w *Writer) grow() bool {
	size := w.slots.Capacity()
	n := min(2*size, w.pub.Capacity())
	if n <= size || w.pub.Grow(n) != nil {
		return false
	}
	w.slots.Grow(n)
	w.extendSlots(n)
	return true
}

// Begin starts a layout of the store (or the views) at revision rev, of
// services (their names are "namespace/name"; Add refers to them by
// index). The layout ends with End; until then Build must not be called.
// Begin keeps services' Ports slices: do not modify them.
func (w *Writer) Begin(rev uint64, services []ServiceInfo) {
	w.rev = rev
	names := make([]string, len(services))
	for i, s := range services {
		names[i] = s.Namespace + "/" + s.Name
	}
	w.services = extend(w.services, names)
	w.infoSvc = services
	w.ids = slices.Grow(w.ids[:0], len(services))[:len(services)]
	for i, name := range names {
		w.ids[i], _ = w.services.ID(name)
	}
	w.counts = slices.Grow(w.counts[:0], len(services))[:len(services)]
	clear(w.counts)
	w.lastPorts = slices.Grow(w.lastPorts[:0], len(services))[:len(services)]
	clear(w.lastPorts)
	for i := range w.refs {
		w.refs[i] = Ref{-1, -1}
	}
	clear(w.state)
	clear(w.infos)
	w.pairs = w.pairs[:0]
	if w.pairIDs == nil {
		w.pairIDs = make(map[locPair]int32)
	}
	clear(w.pairIDs)
	w.fresh = false
}

// Add lays out one instance of the service with index svc in Begin's
// services. It returns the instance's key ("namespace/service/id"; the
// string the writer holds for it, the same at every layout while the
// instance keeps its slot) and its slot, or -1 if it has none: every
// slot is taken and the tables have the publisher's Capacity
// (WriterConfig.Dropped is told).
func (w *Writer) Add(svc int, in Instance) (key string, slot int) {
	w.step()
	s := &w.infoSvc[svc]
	ref := Ref{int32(svc), w.counts[svc]}
	w.counts[svc]++
	kb := append(append(append(append(append(w.keyBuf[:0], s.Namespace...), '/'), s.Name...), '/'), in.ID...)
	w.keyBuf = kb
	if held, ok := w.slots.LookupBytes(kb); ok {
		key, _, _ = w.slots.Key(held)
	} else {
		key = string(kb)
	}
	slot, err := w.slots.Assign(key)
	for err != nil && errors.Is(err, ErrCapacity) && w.grow() {
		slot, err = w.slots.Assign(key)
	}
	if err != nil {
		if w.dropped != nil {
			w.dropped(key, err)
		}
		return key, -1
	}
	w.refs[slot] = ref
	w.state[slot] = slotState{weight: in.Weight, baseWeight: in.BaseWeight, verdict: in.Verdict,
		lifecycle: in.Lifecycle, flags: in.Flags, shift: in.Shift}
	p := locPair{in.Region, in.Zone}
	pi, ok := w.pairIDs[p]
	if !ok {
		pi = int32(len(w.pairs))
		w.pairs = append(w.pairs, p)
		w.pairIDs[p] = pi
	}
	w.pair[slot] = pi
	w.infos[slot] = w.info(slot, svc, &in)
	return key, slot
}

// info returns the InstanceInfo of in, laid out in slot: the previous
// directory's when it still describes in, else a new one. A new one
// shares the ports map of the service's previous instance when it holds
// the same numbers (a small map costs some 200 bytes).
func (w *Writer) info(slot, svc int, in *Instance) *InstanceInfo {
	var prev *InstanceInfo
	if w.dir != nil && slot < len(w.dir.Instances) {
		prev = w.dir.Instances[slot]
	}
	keep := prev != nil && prev.ID == in.ID && prev.Incarnation == in.Incarnation
	if keep && in.Info != nil {
		keep = slices.Equal(prev.Addrs, in.Info.Addrs) && maps.Equal(prev.Ports, in.Info.Ports)
	}
	if keep {
		w.lastPorts[svc] = prev.Ports
		return prev
	}
	w.fresh = true
	var info *InstanceInfo
	if in.Info != nil {
		c := *in.Info
		c.ID, c.Incarnation = in.ID, in.Incarnation
		info = &c
	} else {
		info = &InstanceInfo{ID: in.ID, Incarnation: in.Incarnation}
		for _, a := range in.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				info.Addrs = append(info.Addrs, ip.Unmap())
			}
		}
		if last := w.lastPorts[svc]; samePorts(last, in.Ports) {
			info.Ports = last
		} else {
			info.Ports = make(map[string]uint16, len(in.Ports))
			for name, num := range in.Ports {
				info.Ports[name] = uint16(num)
			}
		}
	}
	w.lastPorts[svc] = info.Ports
	return info
}

// End finishes the layout: it frees the slots of the instances the
// layout left out (reusable after the next Build), interns the
// localities, and makes the Directory if anything a reader finds in it
// changed.
func (w *Writer) End() {
	for slot := range w.refs {
		w.step()
		// A key in the table without an instance in the layout.
		if k, _, ok := w.slots.Key(slot); ok && w.refs[slot].Service < 0 {
			w.slots.Free(k)
		}
	}
	// The localities in use, each once (there are few).
	var locs []string
	seen := make(map[string]bool, 16)
	for _, p := range w.pairs {
		for _, l := range [...]string{p.region, p.zone} {
			if !seen[l] {
				seen[l] = true
				locs = append(locs, l)
			}
		}
	}
	w.locs = intern(w.locs, locs)
	w.locIDs = slices.Grow(w.locIDs[:0], len(w.pairs))[:len(w.pairs)]
	for i, p := range w.pairs {
		r, _ := w.locs.ID(p.region)
		z, _ := w.locs.ID(p.zone)
		w.locIDs[i] = locIDs{uint16(r), uint16(z)}
	}
	w.directory()
	w.infoSvc = nil
}

// directory makes the Directory of the layout, or keeps the previous
// one when its services and instances are the same: most store
// revisions change no address, port or service policy (a verdict, a
// report, a lease renewal), and then neither the Directory nor its name
// index is made again.
func (w *Writer) directory() {
	services := make([]ServiceInfo, w.services.Len())
	for i, s := range w.infoSvc {
		services[w.ids[i]] = s
	}
	if old := w.dir; old != nil && !w.fresh && slices.EqualFunc(old.Services, services, sameService) && w.sameInstances(old) {
		return
	}
	d := &Directory{Revision: w.rev, Services: services, Instances: slices.Clone(w.infos)}
	d.Index(func(slot int) uint32 {
		if ref := w.refs[slot]; ref.Service >= 0 {
			return w.ids[ref.Service]
		}
		return 0
	}, w.step)
	w.dir = d
}

// sameInstances reports whether old holds, slot for slot, the layout's
// InstanceInfos.
func (w *Writer) sameInstances(old *Directory) bool {
	if len(old.Instances) != len(w.infos) {
		return false
	}
	for slot, info := range w.infos {
		w.step()
		if old.Instances[slot] != info {
			return false
		}
	}
	return true
}

// Build publishes a table of the last layout. fill, if not nil, is
// called for every slot holding an instance, with the instance's Ref and
// its entry as the layout described it, to rewrite what moved since
// (Verdict, Flags, Weight, BaseWeight, Lifecycle, Shift); it must not change
// Key, Incarnation, Service, Region or Zone. Free slots are written
// empty. After a successful Build, the slots the last layout freed may
// be handed out again.
func (w *Writer) Build(fill func(slot int, ref Ref, e *Entry)) (uint64, error) {
	v, err := w.pub.Build(func(b *Builder) error {
		b.SetStoreRevision(w.rev)
		b.SetServices(w.services)
		b.SetLocalities(w.locs)
		b.SetDirectory(w.dir)
		es := b.Entries()
		if len(es) != len(w.refs) {
			return fmt.Errorf("status: a table of %d slots for a writer of %d: the tables grew behind the writer", len(es), len(w.refs))
		}
		for slot := range es {
			w.step()
			e := &es[slot]
			ref := w.refs[slot]
			if ref.Service < 0 {
				*e = Entry{}
				continue
			}
			_, hash, _ := w.slots.Key(slot)
			st, loc := &w.state[slot], w.locIDs[w.pair[slot]]
			*e = Entry{Key: hash, Incarnation: w.infos[slot].Incarnation, Service: w.ids[ref.Service],
				Weight: st.weight, BaseWeight: st.baseWeight, Region: loc.region, Zone: loc.zone,
				Verdict: st.verdict, Lifecycle: st.lifecycle, Flags: st.flags, Shift: st.shift}
			if fill != nil {
				fill(slot, ref, e)
			}
		}
		return nil
	})
	if err == nil {
		w.slots.Recycle()
	}
	return v, err
}

// Directory returns the last layout's Directory (nil before the first).
func (w *Writer) Directory() *Directory { return w.dir }

// Lookup returns the slot key holds in the writer's layout.
func (w *Writer) Lookup(key string) (int, bool) { return w.slots.Lookup(key) }

// Ref returns the instance the last layout put in slot; false for a free
// slot or one out of range.
func (w *Writer) Ref(slot int) (Ref, bool) {
	if slot < 0 || slot >= len(w.refs) || w.refs[slot].Service < 0 {
		return Ref{}, false
	}
	return w.refs[slot], true
}

// samePorts reports whether have (nil: none yet) holds the numbers of
// ports.
func samePorts(have map[string]uint16, ports map[string]int) bool {
	if have == nil || len(have) != len(ports) {
		return false
	}
	for name, num := range ports {
		if n, ok := have[name]; !ok || int(n) != num {
			return false
		}
	}
	return true
}

func sameService(a, b ServiceInfo) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.DNSTTL == b.DNSTTL && a.ARecordLimit == b.ARecordLimit &&
		a.MinHealthyFraction == b.MinHealthyFraction && a.MaxEjectionPercent == b.MaxEjectionPercent && a.ShrinkCap == b.ShrinkCap && a.ShrinkWindow == b.ShrinkWindow &&
		slices.Equal(a.Ports, b.Ports)
}

// extend returns names with the new ones appended (ids stay stable), or
// names itself when nothing is new.
func extend(names *Names, add []string) *Names {
	var fresh []string
	for _, s := range add {
		if _, ok := names.ID(s); !ok && !slices.Contains(fresh, s) {
			fresh = append(fresh, s)
		}
	}
	if len(fresh) == 0 && names != nil {
		return names
	}
	old := make([]string, 0, names.Len()+len(fresh))
	for i := 1; i < names.Len(); i++ {
		old = append(old, names.Name(uint32(i)))
	}
	return NewNames(append(old, fresh...)...)
}

// intern returns the names of the localities in use, sorted: names itself
// when it holds exactly those, else new Names. Unlike services' names,
// localities come and go with instances, so an id is only meaningful
// within one table (readers look them up per table): reclaiming them
// keeps the 16-bit ids from running out however many zones were ever
// named.
func intern(names *Names, use []string) *Names {
	set := make(map[string]bool, 8)
	for _, s := range use {
		if s != "" {
			set[s] = true
		}
	}
	if names != nil && names.Len()-1 == len(set) {
		same := true
		for s := range set {
			if _, ok := names.ID(s); !ok {
				same = false
				break
			}
		}
		if same {
			return names
		}
	}
	sorted := make([]string, 0, len(set))
	for s := range set {
		sorted = append(sorted, s)
	}
	slices.Sort(sorted)
	return NewNames(sorted...)
}
