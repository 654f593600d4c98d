package store

import (
	"maps"

	"github.com/cairn-sd/cairn/wire"
)

// maxInterned bounds the strings an FSM interns: enough for every actor,
// locality, verdict and reason a region uses, and a bound on what a
// client sending ever-new values can make it keep. When it is reached
// the table starts afresh, so that strings seen once (a reason with a
// time in it) cannot keep the common ones out for good.
const maxInterned = 4096

// interner shares equal strings between the records of an FSM. Every
// string decoded from a log entry is an allocation of its own, so without
// it each of 100,000 instances keeps its own "ready", its own registrar
// name and its own copy of each verdict and reason. It changes no value,
// only which copy a record points at, so replicas stay identical.
type interner struct{ m map[string]string }

// str returns the interned copy of s, interning s if it has none.
func (t *interner) str(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := t.m[s]; ok {
		return v
	}
	if t.m == nil || len(t.m) >= maxInterned {
		t.m = make(map[string]string)
	}
	t.m[s] = s
	return s
}

// internInstance points in's repeated strings and its ports map at
// shared copies: the namespace and service name at the service
// definition's (svc, which may be nil), its ports at the map of the
// previous instance of the service that has the same ports, when there
// is one. in must be a record of f, not yet shared with any reader.
//
// Sharing a map is safe because a record's maps, slices and pointers are
// never modified in place once stored (see listInstances): a change
// replaces them.
func (f *fsm) internInstance(in *wire.Instance, svc *wire.Service) {
	if svc != nil {
		in.Namespace, in.Service = svc.Namespace, svc.Name
		last := f.ports[svc.Key()]
		switch {
		case maps.Equal(last, in.Ports) && last != nil && in.Ports != nil:
			in.Ports = last
		case in.Ports != nil:
			f.ports[svc.Key()] = in.Ports
		}
	}
	in.Region, in.Zone = f.strs.str(in.Region), f.strs.str(in.Zone)
	in.Lifecycle = wire.Lifecycle(f.strs.str(string(in.Lifecycle)))
	in.Registrar = f.strs.str(in.Registrar)
	if r := in.Report; r != nil {
		r.Reporter = f.strs.str(r.Reporter)
	}
	f.internHealth(in.Health)
}

// internHealth points a committed verdict's strings at shared copies: a
// region's instances have a handful of verdicts, reasons and observers
// between them. h must not be shared with any reader yet.
func (f *fsm) internHealth(h *wire.Health) {
	if h == nil {
		return
	}
	h.Verdict = f.strs.str(h.Verdict)
	for i, r := range h.Reasons {
		h.Reasons[i] = f.strs.str(r)
	}
	for i := range h.Failing {
		c := &h.Failing[i]
		c.Class, c.Why = f.strs.str(c.Class), f.strs.str(c.Why)
	}
	if e := h.Evidence; e != nil {
		e.Class, e.Observer = f.strs.str(e.Class), f.strs.str(e.Observer)
	}
}

// internEvent points an audit event's repeated strings at shared copies:
// the ring holds 10,000 of them.
func (f *fsm) internEvent(e *wire.Event) {
	e.Kind = wire.EventKind(f.strs.str(string(e.Kind)))
	e.Namespace, e.Service = f.strs.str(e.Namespace), f.strs.str(e.Service)
	e.From, e.To = f.strs.str(e.From), f.strs.str(e.To)
	e.Reason, e.Actor = f.strs.str(e.Reason), f.strs.str(e.Actor)
	if ev := e.Evidence; ev != nil {
		ev.Class, ev.Observer = f.strs.str(ev.Class), f.strs.str(ev.Observer)
	}
}
