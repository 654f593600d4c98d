package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// record is how the FSM keeps one instance: what wire.Instance says, in
// 128 bytes instead of 336 and its verdict in 48 instead of about 200.
// Times are unix nanoseconds in UTC (see nanos); the service's name, the
// locality and registrar, and a verdict's reasons point
// at copies the records share; what most live instances lack (a
// registration id, retired ids, a self-report, a drain or an end) sits
// behind one pointer, nil until there is some. The API's wire.Instance is made
// from it on demand (view), and snapshots are written from those views,
// so what a replica serves and writes is what it was before.
//
// A record's slices, maps and pointers are never modified once stored (a
// change replaces them): a view may share them, and a reader may keep
// them, read-only. The record itself is updated in place under the FSM's
// lock.
type record struct {
	svc            *wire.ServiceKey // shared by the service's records
	id             string
	incarnation    uint64
	sourceRevision uint64
	addresses      []string
	ports          map[string]int // shared with the service's other records when equal
	origin         *origin        // interned
	more           *recordMore    // nil while there is none of it
	verdict        *Verdict       // nil until the evaluator's first commit
	leaseTTL       wire.Duration
	leaseDeadline  int64
	registeredAt   int64
	weight         uint16 // 1–65535 (wire.Registration.Normalize)
	lifecycle      status.Lifecycle
	ttlDefault     bool
}

// origin is where an instance is and who registered it: a region's
// instances have few of them between them.
type origin struct{ region, zone, registrar string }

// recordMore is what a record holds beyond what every live instance
// has. Like the record's other pointers it is never modified once
// stored: a change stores a new one (see record.change).
type recordMore struct {
	registrationID string
	retired        []string
	report         *wire.SelfReport
	drainingSince  int64 // noTime until drained
	terminatedAt   int64 // noTime until terminated
	// ramp is the deploy ramp the incarnation was registered with
	// (wire.Registration.Ramp), 0 for none: a few instances of a
	// rollout have one, most none, so it lives here.
	ramp wire.Duration
	// source is what the registrar registered the incarnation from
	// (wire.Registration.Source), "" when it did not say.
	source string
}

// change stores a new recordMore: the record's changed by fn.
func (r *record) change(fn func(m *recordMore)) {
	m := r.get()
	fn(&m)
	r.more = &m
}

// get returns a copy of the record's recordMore, or of what a record
// without one holds.
func (r *record) get() recordMore {
	if r.more == nil {
		return recordMore{drainingSince: noTime, terminatedAt: noTime}
	}
	return *r.more
}

// noTime is the nanoseconds of the zero time.
const noTime = math.MinInt64

// nanos is t in unix nanoseconds, noTime for the zero time. The int64
// spans the years 1678–2262; a time outside them, which no leader's clock
// gives, is clamped to the nearest end, the same way on every replica.
func nanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return noTime
	case t.Before(time.Unix(0, noTime+1)):
		return noTime + 1
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// fromNanos is nanos' inverse, in UTC as the leader writes times.
func fromNanos(ns int64) time.Time {
	if ns == noTime {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// key returns the record's instance key.
func (r *record) key() wire.InstanceKey {
	return wire.InstanceKey{Namespace: r.svc.Namespace, Service: r.svc.Name, ID: r.id}
}

func (r *record) registrationID() string { return r.get().registrationID }

func (r *record) retired() []string { return r.get().retired }

func (r *record) report() *wire.SelfReport { return r.get().report }

func (r *record) drainingSince() int64 { return r.get().drainingSince }

func (r *record) terminatedAt() int64 { return r.get().terminatedAt }

func (r *record) ramp() wire.Duration { return r.get().ramp }

func (r *record) source() string { return r.get().source }

// view is the record as the API shows it. It shares the record's
// addresses, ports, retired ids, report and the verdict's lists,
// read-only; its Health is its own.
func (r *record) view() wire.Instance {
	in := r.bare()
	if r.verdict != nil {
		h := r.verdict.Health()
		in.Health = &h
	}
	return in
}

// bare is view without the Health.
func (r *record) bare() wire.Instance {
	return wire.Instance{
		Namespace: r.svc.Namespace, Service: r.svc.Name, ID: r.id,
		Incarnation:            r.incarnation,
		Addresses:              r.addresses,
		Ports:                  r.ports,
		Region:                 r.origin.region,
		Zone:                   r.origin.zone,
		Weight:                 int(r.weight),
		Lifecycle:              r.lifecycle,
		LeaseTTL:               r.leaseTTL,
		LeaseTTLDefault:        r.ttlDefault,
		LeaseDeadline:          fromNanos(r.leaseDeadline),
		Registrar:              r.origin.registrar,
		RegistrationID:         r.registrationID(),
		RetiredRegistrationIDs: r.retired(),
		SourceRevision:         r.sourceRevision,
		RegisteredAt:           fromNanos(r.registeredAt),
		DrainingSince:          fromNanos(r.drainingSince()),
		TerminatedAt:           fromNanos(r.terminatedAt()),
		Report:                 r.report(),
		Ramp:                   r.ramp(),
		Source:                 r.source(),
	}
}

// recordOf makes the record of in, an instance of a snapshot, sharing
// what it repeats with the FSM's other records. It refuses what no
// version of the FSM writes, naming the field.
func (f *fsm) recordOf(in *wire.Instance) (*record, error) {
	lc := in.Lifecycle // a name: decoding refuses other text
	if lc > status.Terminated {
		return nil, fmt.Errorf("instance %s: %w", in.Key(), invalid("lifecycle", "%s is not starting, ready, draining or terminated", in.Lifecycle))
	}
	if in.Weight < 1 || in.Weight > 65535 {
		return nil, fmt.Errorf("instance %s: %w", in.Key(), invalid("weight", "%d is out of range 1-65535", in.Weight))
	}
	if in.Ramp < 0 || in.Ramp.D() > wire.MaxRamp {
		return nil, fmt.Errorf("instance %s: %w", in.Key(), invalid("ramp", "%s is out of range 0-%s", in.Ramp, wire.MaxRamp))
	}
	r := &record{
		svc: f.serviceKey(wire.ServiceKey{Namespace: in.Namespace, Name: in.Service}), id: in.ID,
		incarnation: in.Incarnation, sourceRevision: in.SourceRevision,
		addresses: in.Addresses, ports: f.sharedPorts(wire.ServiceKey{Namespace: in.Namespace, Name: in.Service}, in.Ports),
		origin:   f.origin(in.Region, in.Zone, in.Registrar),
		leaseTTL: in.LeaseTTL, leaseDeadline: nanos(in.LeaseDeadline), registeredAt: nanos(in.RegisteredAt),
		weight: uint16(in.Weight), lifecycle: lc, ttlDefault: in.LeaseTTLDefault,
	}
	m := recordMore{registrationID: in.RegistrationID, retired: in.RetiredRegistrationIDs, report: in.Report,
		drainingSince: nanos(in.DrainingSince), terminatedAt: nanos(in.TerminatedAt), ramp: in.Ramp, source: in.Source}
	if m.registrationID != "" || m.retired != nil || m.report != nil || m.drainingSince != noTime || m.terminatedAt != noTime || m.ramp != 0 || m.source != "" {
		r.more = &m
	}
	if rep := m.report; rep != nil {
		rep.Reporter = f.strs.str(rep.Reporter)
	}
	if in.Health != nil {
		r.verdict = f.verdictOf(in.Health)
	}
	return r, nil
}

// Verdict is a committed verdict (wire.Health) as the replica keeps it:
// times as unix nanoseconds, and its name, flags and reasons in a copy
// that the instances with the same ones share. It is never modified once
// stored, so a reader may keep it; Health returns the wire form.
type Verdict struct {
	incarnation   uint64
	head          *verdictHead // interned
	eligibleSince int64
	at            int64
	evidence      *wire.Evidence
	more          *verdictMore // nil when nothing is failing or quarantined
}

// verdictHead is what many instances' verdicts have in common.
type verdictHead struct {
	verdict                  status.Verdict
	eligible, healthEligible bool
	flags                    status.Flags
	reasons                  []string
}

// verdictMore is what only a failing or quarantined instance's verdict
// holds.
type verdictMore struct {
	failingSince    int64
	quarantineUntil int64
	quarantineLevel int
	failing         []wire.FailingClass
}

// Incarnation is the incarnation the verdict judges.
func (v *Verdict) Incarnation() uint64 { return v.incarnation }

// Verdict is the verdict itself: unknown, healthy, degraded, unhealthy
// or quarantined.
func (v *Verdict) Verdict() status.Verdict { return v.head.verdict }

// Eligible is the published eligibility.
func (v *Verdict) Eligible() bool { return v.head.eligible }

// Flags are the status table's flag bits.
func (v *Verdict) Flags() status.Flags { return v.head.flags }

// EligibleSince is when the instance was last published.
func (v *Verdict) EligibleSince() time.Time { return fromNanos(v.eligibleSince) }

// Health returns the verdict in its wire form. It allocates nothing: its
// lists and its evidence are the verdict's, read-only.
func (v *Verdict) Health() wire.Health {
	h := wire.Health{Incarnation: v.incarnation, Verdict: v.head.verdict, Eligible: v.head.eligible,
		HealthEligible: v.head.healthEligible, Flags: v.head.flags, EligibleSince: fromNanos(v.eligibleSince),
		Reasons: v.head.reasons, Evidence: v.evidence, At: fromNanos(v.at)}
	if m := v.more; m != nil {
		h.FailingSince = fromNanos(m.failingSince)
		h.QuarantineUntil = fromNanos(m.quarantineUntil)
		h.QuarantineLevel = m.quarantineLevel
		h.Failing = m.failing
	}
	return h
}

// NewVerdict returns h as a Verdict, sharing nothing with a replica: for
// tests of what reads verdicts.
func NewVerdict(h wire.Health) *Verdict {
	var f fsm
	h.Failing, h.Reasons = slices.Clone(h.Failing), slices.Clone(h.Reasons)
	if h.Evidence != nil {
		e := *h.Evidence
		h.Evidence = &e
	}
	return f.verdictOf(&h)
}

// verdictOf makes the Verdict of h, which must not be shared with any
// reader: it keeps h's lists (empty ones as nil, as a snapshot restores
// them) and its evidence.
func (f *fsm) verdictOf(h *wire.Health) *Verdict {
	for i := range h.Failing {
		c := &h.Failing[i]
		c.Class, c.Why = f.strs.str(c.Class), f.strs.str(c.Why)
	}
	if e := h.Evidence; e != nil {
		e.Class, e.Observer = f.strs.str(e.Class), f.strs.str(e.Observer)
	}
	v := &Verdict{incarnation: h.Incarnation, head: f.verdictHead(h), eligibleSince: nanos(h.EligibleSince),
		at: nanos(h.At), evidence: h.Evidence}
	if !h.FailingSince.IsZero() || !h.QuarantineUntil.IsZero() || h.QuarantineLevel != 0 || len(h.Failing) > 0 {
		v.more = &verdictMore{failingSince: nanos(h.FailingSince), quarantineUntil: nanos(h.QuarantineUntil),
			quarantineLevel: h.QuarantineLevel}
		if len(h.Failing) > 0 {
			v.more.failing = h.Failing
		}
	}
	return v
}

// verdictHead returns the shared head of h's verdict, making it if no
// record has one like it. The table is bounded as the interner is.
func (f *fsm) verdictHead(h *wire.Health) *verdictHead {
	// The verdict, flags and booleans in three bytes, then each reason
	// with its length first, so that no two heads share a key.
	b := f.headKey[:0]
	b = append(b, byte(h.Verdict), byte(h.Flags), boolByte(h.Eligible)|boolByte(h.HealthEligible)<<1)
	for _, r := range h.Reasons {
		b = appendString(b, r)
	}
	f.headKey = b
	if v, ok := f.heads[string(b)]; ok {
		return v
	}
	v := &verdictHead{verdict: h.Verdict, eligible: h.Eligible, healthEligible: h.HealthEligible, flags: h.Flags}
	if len(h.Reasons) > 0 {
		v.reasons = make([]string, len(h.Reasons))
		for i, r := range h.Reasons {
			v.reasons[i] = f.strs.str(r)
		}
	}
	if f.heads == nil || len(f.heads) >= maxInterned {
		f.heads = make(map[string]*verdictHead)
	}
	f.heads[string(b)] = v
	return v
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// index holds the records by service, then by id: a key of 16 bytes an
// instance instead of a wire.InstanceKey's 48, and a service's records at
// hand for a listing of that service.
type index struct {
	svcs map[wire.ServiceKey]map[string]*record
	n    int
}

func newIndex() index { return index{svcs: map[wire.ServiceKey]map[string]*record{}} }

func (x *index) get(k wire.InstanceKey) *record {
	return x.svcs[wire.ServiceKey{Namespace: k.Namespace, Name: k.Service}][k.ID]
}

// put stores r in place of the record of its key, if any.
func (x *index) put(r *record) {
	m := x.svcs[*r.svc]
	if m == nil {
		m = map[string]*record{}
		x.svcs[*r.svc] = m
	}
	if _, ok := m[r.id]; !ok {
		x.n++
	}
	m[r.id] = r
}

// del removes the record of r's key, if any. It may be called while
// ranging over all.
func (x *index) del(r *record) {
	m := x.svcs[*r.svc]
	if _, ok := m[r.id]; !ok {
		return
	}
	delete(m, r.id)
	x.n--
	if len(m) == 0 {
		delete(x.svcs, *r.svc) // a map keeps the size of its peak
	}
}

func (x *index) len() int { return x.n }

// services appends the key of every service that has records to buf.
func (x *index) services(buf []wire.ServiceKey) []wire.ServiceKey {
	for k := range x.svcs {
		buf = append(buf, k)
	}
	return buf
}

// appendService appends the records of service k to buf.
func (x *index) appendService(buf []*record, k wire.ServiceKey) []*record {
	for _, r := range x.svcs[k] {
		buf = append(buf, r)
	}
	return buf
}

// all yields every record, in no order.
func (x *index) all(yield func(*record) bool) {
	for _, m := range x.svcs {
		for _, r := range m {
			if !yield(r) {
				return
			}
		}
	}
}
