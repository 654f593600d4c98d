package dnsserver

import (
	"strings"

	"github.com/cairn-sd/cairn/status"
)

// view indexes one status.Directory by the lower-case names queries
// use. It is built once per Directory (the writer makes a new one only
// when the store changed) and shared by every query that sees it.
type view struct {
	dir  *status.Directory
	svc  map[string]uint32   // "svc.ns" → service id
	ns   map[string]struct{} // namespaces with a service
	inst map[string]uint32   // "instance.svc.ns" → slot
}

func newView(t *status.Table) *view {
	d := t.Directory()
	v := &view{dir: d, svc: map[string]uint32{}, ns: map[string]struct{}{}, inst: map[string]uint32{}}
	if d == nil {
		return v
	}
	for id := 1; id < len(d.Services); id++ {
		s := d.Services[id]
		if s.Name == "" {
			continue
		}
		v.svc[strings.ToLower(s.Name+"."+s.Namespace)] = uint32(id)
		v.ns[strings.ToLower(s.Namespace)] = struct{}{}
	}
	for slot, in := range d.Instances {
		if in == nil || slot >= t.Capacity() {
			continue
		}
		e := t.Entry(slot)
		s, ok := d.Service(e.Service)
		if !ok || e.Incarnation != in.Incarnation {
			continue
		}
		v.inst[strings.ToLower(in.ID+"."+s.Name+"."+s.Namespace)] = uint32(slot)
	}
	return v
}

// key writes the lower-cased labels joined by dots into buf and returns
// the bytes; callers index the maps with string(key) directly, which the
// compiler does without allocating.
func key(buf []byte, labels ...string) []byte {
	b := buf[:0]
	for i, l := range labels {
		if i > 0 {
			b = append(b, '.')
		}
		for j := 0; j < len(l); j++ {
			c := l[j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
	}
	return b
}
