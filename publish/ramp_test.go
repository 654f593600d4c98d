package publish

import (
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestDeployRampWeights: the table build weighs an incarnation
// registered with a deploy ramp over the longer of the ramp and the
// service's slow_start, and one registered without over the service's
// alone; a new incarnation without a ramp has none.
func TestDeployRampWeights(t *testing.T) {
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	slow := wire.Duration(2 * time.Second)
	svc.Policy.SlowStart = &slow
	h.apply(svc)
	long := reg(svc, "long", "10.0.0.1")
	long.Ramp = wire.Duration(20 * time.Second)
	short := reg(svc, "short", "10.0.0.2")
	short.Ramp = wire.Duration(time.Second)
	inLong, inShort, inNone := h.register(long), h.register(short), h.register(reg(svc, "none", "10.0.0.3"))
	if inLong.Ramp != long.Ramp || inShort.Ramp != short.Ramp || inNone.Ramp != 0 {
		t.Fatalf("ramps recorded %v %v %v; want 20s 1s 0s", inLong.Ramp, inShort.Ramp, inNone.Ramp)
	}
	check := func(in wire.Instance, weight int, slowStart bool) {
		t.Helper()
		e := h.wantEntry(in, status.Unknown, true)
		if int(e.Weight) != weight || e.Flags.Has(status.SlowStart) != slowStart {
			t.Errorf("%s: weight %d flags %v; want %d, slow start %t", in.ID, e.Weight, e.Flags, weight, slowStart)
		}
	}
	h.tick(time.Second)
	check(inLong, 15, true)  // 0.1 + 0.9 × 1/20
	check(inShort, 55, true) // the policy's 2s, not the ramp's 1s
	check(inNone, 55, true)
	h.tick(4 * time.Second)
	check(inLong, 33, true) // 0.1 + 0.9 × 5/20, long past the policy's 2s
	check(inShort, 100, false)
	check(inNone, 100, false)
	h.tick(15 * time.Second)
	check(inLong, 100, false)

	again := reg(svc, "long", "10.0.0.1")
	again.Replaces = inLong.Incarnation
	next := h.register(again)
	if next.Incarnation == inLong.Incarnation || next.Ramp != 0 {
		t.Fatalf("re-registered as incarnation %d with ramp %v; want a new incarnation without a ramp", next.Incarnation, next.Ramp)
	}
	h.tick(time.Second)
	check(next, 55, true)
	h.tick(time.Second)
	check(next, 100, false)
}
