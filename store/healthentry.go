package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// The evaluator's commits are the store's most frequent large entries: a
// round that flips thousands of instances commits thousands of updates,
// and every replica decodes each one while the status table and the DNS
// server share its core. In JSON, encoding 200 updates took about 0.4 ms
// and decoding them about 0.9 ms, in one piece each. They are written in
// the compact binary form below instead; every other command stays JSON.
//
// An entry starts with healthMagic, a byte no JSON document starts with,
// then a format version. Strings are a length and UTF-8 bytes; counts and
// incarnations are unsigned varints; a time is a presence byte, then
// seconds since 1970 (signed varint) and nanoseconds (unsigned varint),
// read back in UTC — what encoding/json gives for the times the leader
// writes. Empty lists read back as nil, as from JSON. The decoder checks
// every length against what is left, refuses trailing bytes, unknown
// flag bits and versions, so a damaged entry is refused the same way on
// every replica.
const (
	healthMagic   byte = 0xC7
	healthVersion byte = 1
)

// Health bits.
const (
	hbEligible byte = 1 << iota
	hbHealthEligible
	hbEvidence
	hbTransition
	hbKnown = hbEligible | hbHealthEligible | hbEvidence | hbTransition
)

// The fewest bytes each encoded item takes, to bound counts before
// allocating for them.
const (
	minUpdateBytes  = 3 + 1 + 1 + 2 + 2 + 1 + 1 + 1 + 1 + 1 // key, incarnation, verdict, bits+flags, 2 times, failing, level, until, reasons, at
	minFailingBytes = 1 + 1 + 1 + 1
	minEventBytes   = 6
)

// Earliest and latest second a time may carry: years 1 to 9999, what a
// snapshot's JSON can hold.
const (
	minUnix = -62135596800
	maxUnix = 253402300799
)

// errNotBinary: c holds something the binary form does not carry (a
// string that is not UTF-8, a time JSON cannot write); it goes as JSON.
var errNotBinary = errors.New("store: command not representable in the binary health form")

// encodeCommand is how the leader writes c into the log.
func encodeCommand(c command) ([]byte, error) {
	if c.Op == opHealth {
		if b, err := encodeHealthEntry(c); err == nil {
			return b, nil
		}
	}
	return json.Marshal(c)
}

// decodeCommand reads a log entry written by encodeCommand (or by an
// older version, in JSON).
func decodeCommand(data []byte) (command, error) {
	if len(data) > 0 && data[0] == healthMagic {
		return decodeHealthEntry(data)
	}
	var c command
	err := json.Unmarshal(data, &c)
	return c, err
}

// encodeHealthEntry writes an opHealth command: its time, actor, updates
// and service events (the only fields CommitHealth sets).
func encodeHealthEntry(c command) ([]byte, error) {
	rest := c
	rest.Op, rest.At, rest.Actor, rest.Health, rest.ServiceEvents = "", time.Time{}, "", nil, nil
	if !reflect.ValueOf(rest).IsZero() {
		return nil, errNotBinary
	}
	e := healthEncoder{b: make([]byte, 0, 64+len(c.Health)*96+len(c.ServiceEvents)*64)}
	e.b = append(e.b, healthMagic, healthVersion)
	e.time(c.At)
	e.str(c.Actor)
	e.uint(uint64(len(c.Health)))
	for i := range c.Health {
		e.update(&c.Health[i])
	}
	e.uint(uint64(len(c.ServiceEvents)))
	for i := range c.ServiceEvents {
		se := &c.ServiceEvents[i]
		e.str(string(se.Kind))
		e.str(se.Namespace)
		e.str(se.Service)
		e.str(se.Instance)
		e.uint(se.Incarnation)
		e.str(se.Detail)
	}
	if e.bad {
		return nil, errNotBinary
	}
	return e.b, nil
}

type healthEncoder struct {
	b   []byte
	bad bool
}

func (e *healthEncoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }

func (e *healthEncoder) str(s string) {
	if !utf8.ValidString(s) {
		e.bad = true
	}
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *healthEncoder) time(t time.Time) {
	if t.IsZero() {
		e.b = append(e.b, 0)
		return
	}
	sec := t.Unix()
	if sec < minUnix || sec > maxUnix {
		e.bad = true
	}
	e.b = append(e.b, 1)
	e.b = binary.AppendVarint(e.b, sec)
	e.uint(uint64(t.Nanosecond()))
}

func (e *healthEncoder) update(u *HealthUpdate) {
	e.str(u.Key.Namespace)
	e.str(u.Key.Service)
	e.str(u.Key.ID)
	h := &u.Health
	e.uint(h.Incarnation)
	if h.Verdict > status.Quarantined {
		e.bad = true // nameless: JSON refuses it too
	}
	e.str(h.Verdict.String())
	var bits byte
	if h.Eligible {
		bits |= hbEligible
	}
	if h.HealthEligible {
		bits |= hbHealthEligible
	}
	if h.Evidence != nil {
		bits |= hbEvidence
	}
	if u.Transition != nil {
		bits |= hbTransition
	}
	e.b = append(e.b, bits, byte(h.Flags))
	e.time(h.EligibleSince)
	e.time(h.FailingSince)
	e.uint(uint64(len(h.Failing)))
	for _, f := range h.Failing {
		e.str(f.Class)
		e.time(f.Since)
		hard := byte(0)
		if f.Hard {
			hard = 1
		}
		e.b = append(e.b, hard)
		e.str(f.Why)
	}
	e.b = binary.AppendVarint(e.b, int64(h.QuarantineLevel))
	e.time(h.QuarantineUntil)
	e.uint(uint64(len(h.Reasons)))
	for _, r := range h.Reasons {
		e.str(r)
	}
	if ev := h.Evidence; ev != nil {
		e.str(ev.Class)
		e.str(ev.Observer)
		e.time(ev.At)
	}
	e.time(h.At)
	if t := u.Transition; t != nil {
		e.str(t.From)
		e.str(t.To)
		e.str(t.Reason)
	}
}

// decodeHealthEntry reads what encodeHealthEntry wrote.
func decodeHealthEntry(data []byte) (command, error) {
	d := healthDecoder{b: data}
	if len(d.b) < 2 || d.b[0] != healthMagic {
		return command{}, errors.New("not a binary health entry")
	}
	if v := d.b[1]; v != healthVersion {
		return command{}, fmt.Errorf("binary health entry of version %d; this version reads %d", v, healthVersion)
	}
	d.b = d.b[2:]
	c := command{Op: opHealth}
	c.At = d.time()
	c.Actor = d.str()
	if n := d.count(minUpdateBytes); n > 0 {
		c.Health = make([]HealthUpdate, n)
		for i := range c.Health {
			d.update(&c.Health[i])
		}
	}
	if n := d.count(minEventBytes); n > 0 {
		c.ServiceEvents = make([]ServiceEvent, n)
		for i := range c.ServiceEvents {
			se := &c.ServiceEvents[i]
			se.Kind = wire.EventKind(d.str())
			se.Namespace = d.str()
			se.Service = d.str()
			se.Instance = d.str()
			se.Incarnation = d.uint()
			se.Detail = d.str()
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d bytes after the last event", len(d.b))
	}
	if d.err != nil {
		return command{}, d.err
	}
	return c, nil
}

// healthDecoder reads an entry front to back; after the first error every
// read returns a zero value and the error stays.
type healthDecoder struct {
	b    []byte
	err  error
	seen map[string]string // one copy of each string the entry repeats
}

func (d *healthDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("binary health entry: "+format, args...)
	}
	d.b = nil
}

func (d *healthDecoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if !d.number(n) {
		return 0
	}
	return v
}

func (d *healthDecoder) int() int64 {
	v, n := binary.Varint(d.b)
	if !d.number(n) {
		return 0
	}
	return v
}

// number consumes a varint of n bytes as binary.Uvarint or Varint
// measured it, or fails: n ≤ 0 is a truncated or overflowing one, and a
// longer form than needed would not encode back the same.
func (d *healthDecoder) number(n int) bool {
	if n <= 0 || n > 1 && d.b[n-1] == 0 {
		d.fail("bad number")
		return false
	}
	d.b = d.b[n:]
	return true
}

func (d *healthDecoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// count reads a list's length: each element takes at least min bytes.
func (d *healthDecoder) count(min int) int {
	n := d.uint()
	if n > uint64(len(d.b)/min) {
		d.fail("%d items do not fit in %d bytes", n, len(d.b))
		return 0
	}
	return int(n)
}

func (d *healthDecoder) str() string {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail("string of %d bytes in %d", n, len(d.b))
		return ""
	}
	raw := d.b[:n]
	d.b = d.b[n:]
	if s, ok := d.seen[string(raw)]; ok {
		return s
	}
	if !utf8.Valid(raw) {
		d.fail("string is not UTF-8")
		return ""
	}
	s := string(raw)
	if d.seen == nil {
		d.seen = make(map[string]string, 16)
	}
	d.seen[s] = s
	return s
}

func (d *healthDecoder) time() time.Time {
	switch d.byte() {
	case 0:
		return time.Time{}
	case 1:
	default:
		d.fail("bad time presence byte")
		return time.Time{}
	}
	sec, nsec := d.int(), d.uint()
	if d.err != nil {
		return time.Time{}
	}
	if sec < minUnix || sec > maxUnix || nsec >= 1e9 {
		d.fail("time %d.%d out of range", sec, nsec)
		return time.Time{}
	}
	t := time.Unix(sec, int64(nsec)).UTC()
	if t.IsZero() {
		// The zero time is written as absent; anything else that reads
		// back as zero would not encode the same.
		d.fail("zero time written as present")
	}
	return t
}

func (d *healthDecoder) update(u *HealthUpdate) {
	u.Key.Namespace = d.str()
	u.Key.Service = d.str()
	u.Key.ID = d.str()
	h := &u.Health
	h.Incarnation = d.uint()
	// A verdict name this version does not know reads as unknown
	// (status.Verdict.UnmarshalText): refusing it would stop this
	// replica applying a newer leader's log.
	_ = h.Verdict.UnmarshalText([]byte(d.str()))
	bits := d.byte()
	if bits&^hbKnown != 0 {
		d.fail("unknown health bits %#x", bits)
		return
	}
	h.Eligible = bits&hbEligible != 0
	h.HealthEligible = bits&hbHealthEligible != 0
	h.Flags = status.Flags(d.byte())
	h.EligibleSince = d.time()
	h.FailingSince = d.time()
	if n := d.count(minFailingBytes); n > 0 {
		h.Failing = make([]wire.FailingClass, n)
		for i := range h.Failing {
			f := &h.Failing[i]
			f.Class = d.str()
			f.Since = d.time()
			switch d.byte() {
			case 0:
			case 1:
				f.Hard = true
			default:
				d.fail("bad boolean")
			}
			f.Why = d.str()
		}
	}
	h.QuarantineLevel = int(d.int())
	h.QuarantineUntil = d.time()
	if n := d.count(1); n > 0 {
		h.Reasons = make([]string, n)
		for i := range h.Reasons {
			h.Reasons[i] = d.str()
		}
	}
	if bits&hbEvidence != 0 {
		h.Evidence = &wire.Evidence{Class: d.str(), Observer: d.str(), At: d.time()}
	}
	h.At = d.time()
	if bits&hbTransition != 0 {
		u.Transition = &Transition{From: d.str(), To: d.str(), Reason: d.str()}
	}
}
