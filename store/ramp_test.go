package store

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/golden"
	"github.com/cairn-sd/cairn/wire"
)

// TestFSMDeployRamp: a registration's ramp is stored with its
// incarnation (in the record's extras, not every record's fields), is
// part of its content (the same ramp is a retry, another is another
// registration), survives a snapshot, and a new incarnation registered
// without one has none.
func TestFSMDeployRamp(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	c := registerCmd("a")
	c.Register.Ramp = wire.Duration(20 * time.Second)
	first := l.must(c)
	if !first.Created || first.Instance.Ramp != c.Register.Ramp {
		t.Fatalf("registered with ramp %v: created=%t, ramp %v", c.Register.Ramp, first.Created, first.Instance.Ramp)
	}
	if rec := l.f.instances.get(webKey("a")); rec.more == nil || rec.ramp() != c.Register.Ramp {
		t.Fatalf("the record holds ramp %v (extras %v), want %v", rec.ramp(), rec.more, c.Register.Ramp)
	}
	if plain := l.must(registerCmd("b")); plain.Instance.Ramp != 0 || l.f.instances.get(webKey("b")).more != nil {
		t.Fatalf("a registration without a ramp: ramp %v, extras %v; want none", plain.Instance.Ramp, l.f.instances.get(webKey("b")).more)
	}

	t.Run("an identical retry is the same registration", func(t *testing.T) {
		if r := l.must(c); r.Created || r.Instance.Incarnation != first.Instance.Incarnation || r.Instance.Ramp != c.Register.Ramp {
			t.Fatalf("retry: created=%t incarnation %d ramp %v; want the committed %d with %v",
				r.Created, r.Instance.Incarnation, r.Instance.Ramp, first.Instance.Incarnation, c.Register.Ramp)
		}
	})
	t.Run("another ramp is another registration", func(t *testing.T) {
		other := registerCmd("a")
		other.Register.Ramp = wire.Duration(time.Minute)
		before := withoutRev(l.f)
		if r := l.apply(other); !errors.Is(r.Err, ErrFenced) || !strings.Contains(r.Err.Error(), "other content") {
			t.Fatalf("another ramp without replaces: %+v, %v; want ErrFenced (other content)", r.Instance, r.Err)
		}
		if after := withoutRev(l.f); !reflect.DeepEqual(before.Instances, after.Instances) {
			t.Fatalf("a refused registration changed the instances: %s", firstDiff(after, before))
		}
		none := registerCmd("a") // no ramp at all
		if r := l.apply(none); !errors.Is(r.Err, ErrFenced) {
			t.Fatalf("no ramp without replaces: %v; want ErrFenced", r.Err)
		}
	})
	t.Run("survives a snapshot", func(t *testing.T) {
		restored := newFSM()
		roundTrip(t, l.f, restored)
		if got := instanceOf(t, restored, webKey("a")); got.Ramp != c.Register.Ramp {
			t.Fatalf("restored ramp %v, want %v", got.Ramp, c.Register.Ramp)
		}
		if got := instanceOf(t, restored, webKey("b")); got.Ramp != 0 || restored.instances.get(webKey("b")).more != nil {
			t.Fatalf("restored b with ramp %v, extras %v; want none", got.Ramp, restored.instances.get(webKey("b")).more)
		}
		if want, got := l.f.state(), restored.state(); !reflect.DeepEqual(want, got) {
			t.Fatalf("restored state differs: %s", firstDiff(got, want))
		}
	})
	t.Run("a new incarnation without a ramp has none", func(t *testing.T) {
		next := registerCmd("a")
		next.Register.Replaces = first.Instance.Incarnation
		r := l.must(next)
		if !r.Created || r.Instance.Incarnation == first.Instance.Incarnation || r.Instance.Ramp != 0 {
			t.Fatalf("re-registered: created=%t incarnation %d ramp %v; want a new incarnation without a ramp", r.Created, r.Instance.Incarnation, r.Instance.Ramp)
		}
		if rec := l.f.instances.get(webKey("a")); rec.ramp() != 0 {
			t.Fatalf("the record of the new incarnation holds ramp %v", rec.ramp())
		}
	})
}

// TestFSMRefusesBadRamps: a ramp out of range or finer than a second is
// refused, naming the field and the rule, and changes nothing.
func TestFSMRefusesBadRamps(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	for _, tc := range []struct {
		ramp time.Duration
		rule string
	}{
		{-time.Second, "negative"},
		{wire.MaxRamp + time.Second, "longer than the 1h0m0s"},
		{48 * time.Hour, "longer than the 1h0m0s"},
		{1500 * time.Millisecond, "whole number of seconds"},
	} {
		c := registerCmd("a")
		c.Register.Ramp = wire.Duration(tc.ramp)
		before := withoutRev(l.f)
		r := l.apply(c)
		if !errors.Is(r.Err, wire.ErrInvalid) || !strings.Contains(r.Err.Error(), "ramp") || !strings.Contains(r.Err.Error(), tc.rule) {
			t.Errorf("ramp %v: %v; want an invalid-argument error naming ramp and %q", tc.ramp, r.Err, tc.rule)
		}
		if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
			t.Errorf("ramp %v: a refused registration changed the state: %s", tc.ramp, firstDiff(after, before))
		}
	}
	c := registerCmd("a")
	c.Register.Ramp = wire.Duration(wire.MaxRamp)
	if r := l.must(c); r.Instance.Ramp.D() != wire.MaxRamp {
		t.Fatalf("a ramp of exactly %v: %v", wire.MaxRamp, r.Instance.Ramp)
	}
}

// TestGoldenRamp pins how a registration with a ramp travels in the log
// and rests in a snapshot (new files beside the older goldens, which
// hold no ramp and must read as they always have), and that both read
// back and write the same.
func TestGoldenRamp(t *testing.T) {
	c := registerCmd("a")
	c.At = t0
	c.Register.Ramp = wire.Duration(90 * time.Second)
	b, err := encodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "ramp-command.golden", append(b, '\n'))
	back, err := decodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Register == nil || back.Register.Ramp != c.Register.Ramp {
		t.Fatalf("decoded registration %+v, want ramp %v", back.Register, c.Register.Ramp)
	}

	l := newLog(t)
	l.must(applySvc(webService()))
	l.must(c)
	snap := snapshotBytes(t, l.f)
	golden.Check(t, "snapshot-ramp.golden", snap)
	f := newFSM()
	if err := f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatal(err)
	}
	if again := snapshotBytes(t, f); !bytes.Equal(again, snap) {
		t.Errorf("the snapshot restores and writes back as\n%s", again)
	}
	for _, bad := range []string{`"ramp":"-1s"`, `"ramp":"2h0m0s"`} {
		b := bytes.Replace(snap, []byte(`"ramp":"1m30s"`), []byte(bad), 1)
		if bytes.Equal(b, snap) {
			t.Fatal("the snapshot holds no ramp of 1m30s")
		}
		if err := newFSM().Restore(nopCloser{bytes.NewReader(b)}); err == nil || !strings.Contains(err.Error(), "ramp") {
			t.Errorf("Restore with %s = %v, want an error naming ramp", bad, err)
		}
	}
}
