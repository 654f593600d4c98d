package history

import (
	"encoding/binary"
	"errors"

	"github.com/cairn-sd/cairn/status"
)

// A step's changes are kept encoded, each against the slot's state
// before it: the slot, a mask of the fields that changed, and those
// fields. A slow start's step, which changes only weights, takes 4 or 5
// bytes a change where a status.Entry takes 32; a new instance takes
// its whole entry and an index into the step's instances. The same bytes
// go to the file.

// The mask's bits.
const (
	mKey uint64 = 1 << iota
	mIncarnation
	mWeight
	mBaseWeight
	mRegion
	mZone
	mState // verdict, lifecycle, flags and shift: 4 bytes
	mGone  // the slot left the service
	mInfo  // the slot's instance is the step's next
)

// appendChange encodes the change of slot from old to e (gone: it left
// the service; info: its instance is the step's next) onto b.
func appendChange(b []byte, slot uint32, old, e status.Entry, gone, info bool) []byte {
	var mask uint64
	switch {
	case gone:
		mask = mGone
	default:
		if e.Key != old.Key {
			mask |= mKey
		}
		if e.Incarnation != old.Incarnation {
			mask |= mIncarnation
		}
		if e.Weight != old.Weight {
			mask |= mWeight
		}
		if e.BaseWeight != old.BaseWeight {
			mask |= mBaseWeight
		}
		if e.Region != old.Region {
			mask |= mRegion
		}
		if e.Zone != old.Zone {
			mask |= mZone
		}
		if e.Verdict != old.Verdict || e.Lifecycle != old.Lifecycle || e.Flags != old.Flags || e.Shift != old.Shift {
			mask |= mState
		}
		if info {
			mask |= mInfo
		}
	}
	b = binary.AppendUvarint(b, uint64(slot))
	b = binary.AppendUvarint(b, mask)
	if mask&mKey != 0 {
		b = binary.BigEndian.AppendUint64(b, e.Key)
	}
	if mask&mIncarnation != 0 {
		b = binary.AppendUvarint(b, e.Incarnation)
	}
	for _, f := range [...]struct {
		bit uint64
		v   uint16
	}{{mWeight, e.Weight}, {mBaseWeight, e.BaseWeight}, {mRegion, e.Region}, {mZone, e.Zone}} {
		if mask&f.bit != 0 {
			b = binary.AppendUvarint(b, uint64(f.v))
		}
	}
	if mask&mState != 0 {
		b = append(b, byte(e.Verdict), byte(e.Lifecycle), byte(e.Flags), e.Shift)
	}
	return b
}

// delta is one decoded change.
type delta struct {
	slot uint32
	mask uint64
	e    status.Entry // the fields the mask names
	info int          // the index of its instance in the step's, when mInfo
}

var errDelta = errors.New("history: a step's changes are malformed")

// readDelta decodes the change at the start of b, the step's k-th
// instance being next, and returns it and what follows.
func readDelta(b []byte, k int) (delta, []byte, error) {
	var d delta
	u := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	start := len(b)
	slot := u()
	d.mask = u()
	if b == nil && start > 0 || slot >= status.MaxCapacity || d.mask >= mInfo<<1 || d.mask&mGone != 0 && d.mask != mGone {
		return d, nil, errDelta
	}
	d.slot = uint32(slot)
	if d.mask&mKey != 0 {
		if len(b) < 8 {
			return d, nil, errDelta
		}
		d.e.Key, b = binary.BigEndian.Uint64(b), b[8:]
	}
	if d.mask&mIncarnation != 0 {
		d.e.Incarnation = u()
	}
	for _, f := range [...]struct {
		bit uint64
		v   *uint16
	}{{mWeight, &d.e.Weight}, {mBaseWeight, &d.e.BaseWeight}, {mRegion, &d.e.Region}, {mZone, &d.e.Zone}} {
		if d.mask&f.bit != 0 {
			v := u()
			if v > 0xFFFF {
				return d, nil, errDelta
			}
			*f.v = uint16(v)
		}
	}
	if b == nil {
		return d, nil, errDelta
	}
	if d.mask&mState != 0 {
		if len(b) < 4 || b[0] > byte(status.Quarantined) || b[1] > byte(status.Terminated) || b[3] > status.ShiftAll {
			return d, nil, errDelta
		}
		d.e.Verdict, d.e.Lifecycle, d.e.Flags, d.e.Shift = status.Verdict(b[0]), status.Lifecycle(b[1]), status.Flags(b[2]), b[3]
		b = b[4:]
	}
	if d.mask&mInfo != 0 {
		d.info = k
	}
	return d, b, nil
}

// applyTo returns m with d applied, and whether the slot is still the
// service's.
func (d delta) applyTo(m member, infos []*status.InstanceInfo) (member, bool) {
	if d.mask&mGone != 0 {
		return member{}, false
	}
	e := &m.entry
	if d.mask&mKey != 0 {
		e.Key = d.e.Key
	}
	if d.mask&mIncarnation != 0 {
		e.Incarnation = d.e.Incarnation
	}
	if d.mask&mWeight != 0 {
		e.Weight = d.e.Weight
	}
	if d.mask&mBaseWeight != 0 {
		e.BaseWeight = d.e.BaseWeight
	}
	if d.mask&mRegion != 0 {
		e.Region = d.e.Region
	}
	if d.mask&mZone != 0 {
		e.Zone = d.e.Zone
	}
	if d.mask&mState != 0 {
		e.Verdict, e.Lifecycle, e.Flags, e.Shift = d.e.Verdict, d.e.Lifecycle, d.e.Flags, d.e.Shift
	}
	if d.mask&mInfo != 0 && d.info < len(infos) {
		m.info = infos[d.info]
	}
	return m, e.Used()
}

// each decodes st's changes in order: for each, the map of members of
// its service (members(id); nil: decoded, not applied) gets the change,
// and f (if set) is called with the slot's member before and after
// (after.entry unused: it left).
func (st *step) each(members func(id uint32) map[uint32]member, f func(id, slot uint32, before, after member)) error {
	b, k := st.data, 0
	for len(b) > 0 {
		id, n := binary.Uvarint(b)
		if n <= 0 || id > 1<<31 {
			return errDelta
		}
		d, rest, err := readDelta(b[n:], k)
		if err != nil {
			return err
		}
		if d.mask&mInfo != 0 {
			k++
		}
		b = rest
		m := members(uint32(id))
		if m == nil {
			continue
		}
		before := m[d.slot]
		after, kept := d.applyTo(before, st.infos)
		if kept {
			m[d.slot] = after
		} else {
			delete(m, d.slot)
		}
		if f != nil {
			f(uint32(id), d.slot, before, after)
		}
	}
	return nil
}

// check reports whether st's changes decode, name services known and
// localities below nloc, and instances the step holds: what the file's
// are held to.
func (st *step) check(nloc int, known func(id uint32) bool) error {
	b, k := st.data, 0
	for len(b) > 0 {
		id, n := binary.Uvarint(b)
		if n <= 0 || id > 1<<31 || !known(uint32(id)) {
			return errDelta
		}
		d, rest, err := readDelta(b[n:], k)
		if err != nil {
			return err
		}
		if d.mask&mInfo != 0 {
			if k >= len(st.infos) || st.infos[k] == nil {
				return errDelta
			}
			k++
		}
		if int(d.e.Region) >= nloc || int(d.e.Zone) >= nloc {
			return errDelta
		}
		b = rest
	}
	return nil
}
