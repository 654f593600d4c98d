package store

import (
	"maps"

	"github.com/cairn-sd/cairn/wire"
)

// maxInterned bounds the strings an FSM interns: enough for every actor,
// locality, verdict and reason a region uses, and a bound on what a
// client sending ever-new values can make it keep. When it is reached
// the table starts afresh, so that strings seen once (a reason with a
// time in it) cannot keep the common ones out for good. The tables of
// origins and verdict heads are bounded the same way.
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

// serviceKey returns the key that the records of service k share. A
// service is never deleted, so neither is its key.
func (f *fsm) serviceKey(k wire.ServiceKey) *wire.ServiceKey {
	if p := f.keys[k]; p != nil {
		return p
	}
	p := new(wire.ServiceKey)
	*p = k
	if svc := f.services[k]; svc != nil {
		*p = svc.Key() // the definition's strings
	}
	f.keys[*p] = p
	return p
}

// sharedPorts returns ports, or the equal map of the service's last
// instance: a service's instances mostly have the same ports. Sharing a
// map is safe because a record's maps are never modified once stored.
func (f *fsm) sharedPorts(k wire.ServiceKey, ports map[string]int) map[string]int {
	if ports == nil {
		return nil
	}
	if last := f.ports[k]; last != nil && maps.Equal(last, ports) {
		return last
	}
	f.ports[k] = ports
	return ports
}

// origin returns the shared origin with these values, making it if no
// record has one like it.
func (f *fsm) origin(region, zone, registrar string) *origin {
	o := origin{region, zone, registrar}
	if p := f.origins[o]; p != nil {
		return p
	}
	if f.origins == nil || len(f.origins) >= maxInterned {
		f.origins = make(map[origin]*origin)
	}
	p := &origin{f.strs.str(region), f.strs.str(zone), f.strs.str(registrar)}
	f.origins[o] = p
	return p
}

// internEvent points an audit event's repeated strings at shared copies:
// the trail holds 10,000 of them.
func (f *fsm) internEvent(e *wire.Event) {
	e.Kind = wire.EventKind(f.strs.str(string(e.Kind)))
	e.Namespace, e.Service = f.strs.str(e.Namespace), f.strs.str(e.Service)
	e.From, e.To = f.strs.str(e.From), f.strs.str(e.To)
	e.Reason, e.Actor = f.strs.str(e.Reason), f.strs.str(e.Actor)
	if ev := e.Evidence; ev != nil {
		ev.Class, ev.Observer = f.strs.str(ev.Class), f.strs.str(ev.Observer)
	}
}
