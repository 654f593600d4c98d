package status

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fataler is what mustNew needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustNew(t fataler, cfg Config) *Publisher {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return p
}

// stamp writes every slot with the version being built, so that a reader
// can check that a table is whole: every entry's Incarnation equals the
// table's Version, and its Key names its slot.
func stamp(b *Builder) error {
	v := b.Version()
	b.SetStoreRevision(v)
	entries := b.Entries()
	for i := range entries {
		entries[i] = Entry{Key: uint64(i) + 1, Incarnation: v, Weight: uint16(v), BaseWeight: uint16(v), Flags: Eligible}
	}
	return nil
}

// whole reports the first slot of t that stamp did not write at t's
// version, or -1.
func whole(t *Table) int {
	v := t.Version()
	if t.StoreRevision() != v {
		return 0
	}
	for i := range t.Capacity() {
		e := t.Entry(i)
		if e.Incarnation != v || e.Key != uint64(i)+1 || e.Weight != uint16(v) {
			return i
		}
	}
	return -1
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
