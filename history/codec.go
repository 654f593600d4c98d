package history

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// The history's file is a header, then records, each framed as its
// length (4 bytes, big-endian), the CRC-32C of its body (4 bytes) and the
// body: a kind byte and the kind's fields. A record is appended whole
// or, after a crash, found torn at the end: loading stops at the first
// frame that does not check, and the file is cut there.
//
// A rewrite (compact) writes the state as it is: the localities, then
// per service its definitions, its base and its live steps, then the
// freshness timeline.

// fileHeader opens the file; a file of another format is not read.
const fileHeader = "cairn-history 1\n"

// maxRecord bounds one record: a step of 2^24 slots is far past any
// table, so a longer frame is corruption.
const maxRecord = 1 << 28

// The kinds of record.
const (
	kindLocality byte = iota + 1 // a locality name, the next id
	kindInfo                     // a service's definition from a time on
	kindStep                     // a step of a service
	kindBase                     // a service's base (a rewrite's)
	kindFresh                    // a change of the node's freshness
	kindOrigin                   // when the history began
	kindService                  // a service's key and id
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame appends a framed record of body to b.
func frame(b, body []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(body, castagnoli))
	return append(b, body...)
}

// enc builds one record's body.
type enc struct{ b []byte }

func (e *enc) u(v uint64)       { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) str(s string)     { e.u(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(p []byte)   { e.u(uint64(len(p))); e.b = append(e.b, p...) }
func (e *enc) time(t time.Time) { e.b = binary.AppendVarint(e.b, t.UnixNano()) }
func (e *enc) info(in *status.InstanceInfo) {
	if in == nil {
		e.b = append(e.b, 0)
		return
	}
	e.b = append(e.b, 1)
	e.str(in.ID)
	e.u(in.Incarnation)
	e.u(uint64(len(in.Addrs)))
	for _, a := range in.Addrs {
		e.bytes(a.AsSlice())
	}
	names := make([]string, 0, len(in.Ports))
	for name := range in.Ports {
		names = append(names, name)
	}
	slices.Sort(names)
	e.u(uint64(len(names)))
	for _, name := range names {
		e.str(name)
		e.u(uint64(in.Ports[name]))
	}
}

// dec reads one record's body; the first error sticks.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("history: record truncated or malformed at %s", what)
	}
}

func (d *dec) u() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("a number")
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

// n reads a count of things at least min bytes long each, checked
// against what is left.
func (d *dec) n(min int) int {
	v := d.u()
	if v > uint64(len(d.b)/max(min, 1)) {
		d.fail("a count")
		d.b = nil
		return 0
	}
	return int(v)
}

func (d *dec) raw(n int) []byte {
	if n > len(d.b) {
		d.fail("bytes")
		d.b = nil
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) str() string { return string(d.raw(d.n(1))) }

func (d *dec) time() time.Time {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("a time")
		d.b = nil
		return time.Time{}
	}
	d.b = d.b[n:]
	return time.Unix(0, v).UTC()
}

func (d *dec) info() *status.InstanceInfo {
	p := d.raw(1)
	if p == nil || p[0] == 0 {
		return nil
	}
	in := &status.InstanceInfo{ID: d.str(), Incarnation: d.u()}
	for range d.n(5) {
		a, ok := netip.AddrFromSlice(d.raw(d.n(1)))
		if !ok {
			d.fail("an address")
			return nil
		}
		in.Addrs = append(in.Addrs, a)
	}
	if n := d.n(2); n > 0 {
		in.Ports = make(map[string]uint16, n)
		for range n {
			name := d.str()
			v := d.u()
			if v > 65535 {
				d.fail("a port")
			}
			in.Ports[name] = uint16(v)
		}
	}
	return in
}

// stepRecord is a step's record: its namespace, time, version and
// revision, its changes as they are kept (delta.go), and the instances
// they name.
func stepRecord(ns string, st *step) []byte {
	e := enc{b: []byte{kindStep}}
	e.str(ns)
	e.time(st.time())
	e.u(st.version)
	e.u(st.revision)
	e.bytes(st.data)
	e.u(uint64(len(st.infos)))
	for _, in := range st.infos {
		e.info(in)
	}
	return e.b
}

// baseRecord is a service's base: its id, then a step of its namespace
// from nothing to its members, at the step it was last folded from.
func baseRecord(s *service) []byte {
	slots := make([]uint32, 0, len(s.base))
	for slot := range s.base {
		slots = append(slots, slot)
	}
	slices.Sort(slots)
	st := step{nanos: s.baseAt.UnixNano(), version: s.baseVersion, revision: s.baseRevision}
	for _, slot := range slots {
		m := s.base[slot]
		st.data = appendServiceChange(st.data, s.id, slot, status.Entry{}, m.entry, false, m.info != nil)
		if m.info != nil {
			st.infos = append(st.infos, m.info)
		}
	}
	e := enc{b: []byte{kindBase}}
	e.u(uint64(s.id))
	return append(e.b, stepRecord(s.ns, &st)[1:]...)
}

// readStep reads a step's or a base's record after its kind.
func readStep(d *dec) (string, step) {
	ns := d.str()
	st := step{nanos: d.time().UnixNano(), version: d.u(), revision: d.u()}
	st.data = slices.Clone(d.raw(d.n(1)))
	if n := d.n(1); n > 0 {
		st.infos = make([]*status.InstanceInfo, n)
		for i := range st.infos {
			st.infos[i] = d.info()
		}
	}
	return ns, st
}

// serviceRecord names a service's id.
func serviceRecord(s *service) []byte {
	e := enc{b: []byte{kindService}}
	e.u(uint64(s.id))
	e.str(s.key)
	return e.b
}

func infoRecord(key string, is infoStep) ([]byte, error) {
	j, err := json.Marshal(is.info)
	if err != nil {
		return nil, err
	}
	e := enc{b: []byte{kindInfo}}
	e.str(key)
	e.time(is.at)
	e.bytes(j)
	return e.b, nil
}

func localityRecord(name string) []byte {
	e := enc{b: []byte{kindLocality}}
	e.str(name)
	return e.b
}

func originRecord(at time.Time) []byte {
	e := enc{b: []byte{kindOrigin}}
	e.time(at)
	return e.b
}

func freshRecord(fs freshStep) []byte {
	e := enc{b: []byte{kindFresh, byte(fs.f)}}
	e.time(fs.at)
	e.time(fs.synced)
	return e.b
}

// errTorn marks the end of what can be read: a frame cut short or not
// matching its checksum.
var errTorn = errors.New("history: torn or corrupt record")

// nextFrame returns the body of the frame at the start of b and the rest.
func nextFrame(b []byte) (body, rest []byte, err error) {
	if len(b) < 8 {
		return nil, nil, errTorn
	}
	n := binary.BigEndian.Uint32(b)
	sum := binary.BigEndian.Uint32(b[4:])
	if n > maxRecord || uint64(len(b)-8) < uint64(n) {
		return nil, nil, errTorn
	}
	body = b[8 : 8+n]
	if crc32.Checksum(body, castagnoli) != sum || len(body) == 0 {
		return nil, nil, errTorn
	}
	return body, b[8+n:], nil
}
