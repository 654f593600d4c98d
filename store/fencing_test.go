package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestRegisterWithoutRegistrationIDIsFenced: without a registration id, a
// registration replaces a live record only when it names its incarnation
// (replaces); a late retry of an old registration is refused with
// ErrFenced, names the current incarnation, and changes nothing — not
// even the revision, on a ready leader.
func TestRegisterWithoutRegistrationIDIsFenced(t *testing.T) {
	n := storetest.Single(t, store.Config{})
	ctx := t.Context()
	mustApply(t, n.Store, webService(time.Hour))
	first := registration("a", "10.0.0.1")
	one := mustRegister(t, n.Store, first)

	refused := func(what string, reg wire.Registration, current uint64) {
		t.Helper()
		rev, before := n.Revision(), n.Instances("prod", "web")
		events := len(n.Events("", "", 0))
		_, _, err := n.Register(ctx, "registrar", reg)
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("%s: %v, want ErrFenced", what, err)
		}
		if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("replaces %d", current)) {
			t.Errorf("%s: %q does not tell the registrar to pass replaces %d", what, msg, current)
		}
		if n.Revision() != rev || len(n.Events("", "", 0)) != events {
			t.Errorf("%s: revision %d → %d, events %d → %d; a refusal must commit nothing", what, rev, n.Revision(), events, len(n.Events("", "", 0)))
		}
		wantSameState(t, n.Store, n.Services(), before, "after "+what)
	}

	moved := registration("a", "10.0.0.2")
	refused("other content naming nothing", moved, one.Incarnation)
	moved.Replaces = one.Incarnation + 7
	refused("other content naming a made-up incarnation", moved, one.Incarnation)

	moved.Replaces = one.Incarnation
	two, created, err := n.Register(ctx, "registrar", moved)
	if err != nil || !created || two.Incarnation <= one.Incarnation || two.Addresses[0] != "10.0.0.2" {
		t.Fatalf("registration naming incarnation %d: %+v created=%t err=%v; want a new incarnation at 10.0.0.2", one.Incarnation, two, created, err)
	}
	// Its retry names the incarnation it replaced and gets its own result.
	if again, created, err := n.Register(ctx, "registrar", moved); err != nil || created || again.Incarnation != two.Incarnation {
		t.Fatalf("retry of the replacing registration: incarnation %d created=%t err=%v; want %d", again.Incarnation, created, err, two.Incarnation)
	}
	// The late retry of the first registration cannot put the old address
	// back.
	refused("late retry of the first registration", first, two.Incarnation)
	first.Replaces = one.Incarnation
	refused("late retry naming the replaced incarnation", first, two.Incarnation)

	// Draining is live: re-registering needs the incarnation too.
	if _, err := n.Drain(ctx, "admin", key("a"), two.Incarnation); err != nil {
		t.Fatal(err)
	}
	refused("identical registration of a draining instance", registration("a", "10.0.0.2"), two.Incarnation)

	// A deregistered record takes a registration naming nothing, but not
	// one naming an older incarnation.
	if _, err := n.Deregister(ctx, "admin", key("a"), two.Incarnation); err != nil {
		t.Fatal(err)
	}
	refused("registration naming an old incarnation over a tombstone", first, two.Incarnation)
	three, created, err := n.Register(ctx, "registrar", registration("a", "10.0.0.3"))
	if err != nil || !created || three.Incarnation <= two.Incarnation {
		t.Fatalf("registration over a tombstone: %+v created=%t err=%v", three, created, err)
	}
}
