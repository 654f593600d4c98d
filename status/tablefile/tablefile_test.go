package tablefile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/internal/pace"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// publish builds a table of two services and three instances, one slot
// left free between them (an instance that went), into a new publisher.
func publish(t *testing.T) *status.Publisher {
	t.Helper()
	tb := statustest.New(t, 8)
	in := func(id string, inc uint64, zone string) statustest.Instance {
		x := statustest.Ready(id, "10.0.0.2").In("r1", zone)
		x.Incarnation, x.Ports = inc, map[string]uint16{"http": 8080}
		return x
	}
	cart := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "cart", DNSTTL: 5 * time.Second, ARecordLimit: 8,
		Ports: []status.Port{{Name: "http", Number: 8080, Protocol: "tcp"}}}}
	pay := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay", DNSTTL: 7 * time.Second, ARecordLimit: 3}}
	cart.Instances = []statustest.Instance{in("a", 10, "za"), in("b", 11, "zb"), in("gone", 1, "za")}
	pay.Instances = []statustest.Instance{in("c", 12, "za")}
	tb.PublishAt(t, 41, cart, pay)
	cart.Instances = cart.Instances[:2]
	tb.PublishAt(t, 42, cart, pay)
	return tb.Publisher
}

// TestRoundTrip: a table saved and loaded fills a new table with the
// same entries, names, directory and revision.
func TestRoundTrip(t *testing.T) {
	pub := publish(t)
	tbl := pub.Acquire()
	defer tbl.Release()
	path := filepath.Join(t.TempDir(), "table.cairn")
	if err := Save(path, Take(tbl, t0, t0.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil || s == nil {
		t.Fatalf("Load: %v, %v", s, err)
	}
	if s.Revision != 42 || !s.Synced.Equal(t0) || len(s.Entries) != 3 {
		t.Fatalf("loaded revision %d synced %v with %d entries; want 42, %v, 3", s.Revision, s.Synced, len(s.Entries), t0)
	}
	pub2, err := status.New(status.Config{Capacity: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub2.Build(func(b *status.Builder) error {
		if n := s.Fill(b); n != 0 {
			t.Errorf("dropped %d", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := pub2.Acquire()
	defer got.Release()
	if got.StoreRevision() != 42 {
		t.Errorf("revision %d, want 42", got.StoreRevision())
	}
	for slot := range 8 {
		if got.Entry(slot) != tbl.Entry(slot) {
			t.Errorf("slot %d: %+v, want %+v", slot, got.Entry(slot), tbl.Entry(slot))
		}
		if !reflect.DeepEqual(got.Directory().Instance(slot), tbl.Directory().Instance(slot)) {
			t.Errorf("slot %d: instance %+v, want %+v", slot, got.Directory().Instance(slot), tbl.Directory().Instance(slot))
		}
	}
	if !reflect.DeepEqual(got.Directory().Services, tbl.Directory().Services) {
		t.Errorf("services %+v, want %+v", got.Directory().Services, tbl.Directory().Services)
	}
	for _, name := range []string{"shop/cart", "shop/pay"} {
		a, _ := got.Services().ID(name)
		b, _ := tbl.Services().ID(name)
		if a != b {
			t.Errorf("service %s: id %d, want %d", name, a, b)
		}
	}
	if got.Locality(got.Entry(1).Zone) != "zb" || len(got.Members(1)) != 2 {
		t.Errorf("slot 1 zone %q, members of service 1 %v", got.Locality(got.Entry(1).Zone), got.Members(1))
	}

	// A smaller table drops the slots beyond it, and says so.
	pub3, _ := status.New(status.Config{Capacity: 2})
	_, _ = pub3.Build(func(b *status.Builder) error {
		if n := s.Fill(b); n != 1 {
			t.Errorf("capacity 2: dropped %d, want 1", n)
		}
		return nil
	})
}

// TestLoadRefusesWhatItCannotTrust: a missing file is no table; a
// truncated, altered or other-version file is an error wrapping
// ErrCorrupt.
func TestLoadRefusesWhatItCannotTrust(t *testing.T) {
	dir := t.TempDir()
	if s, err := Load(filepath.Join(dir, "none")); s != nil || err != nil {
		t.Fatalf("missing file: %v, %v; want nil, nil", s, err)
	}
	pub := publish(t)
	tbl := pub.Acquire()
	path := filepath.Join(dir, "table.cairn")
	if err := Save(path, Take(tbl, t0, t0)); err != nil {
		t.Fatal(err)
	}
	tbl.Release()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(string(good), "\n")
	for name, b := range map[string]string{
		"truncated":     string(good[:len(good)-10]),
		"flipped byte":  head + "\n" + strings.Replace(body, `"a"`, `"z"`, 1),
		"other version": strings.Replace(head, "cairn-table 1 ", "cairn-table 2 ", 1) + "\n" + body,
		"no header":     body,
		"empty":         "",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
		if s, err := Load(p); s != nil || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, %v; want ErrCorrupt", name, s, err)
		}
	}
	// Nothing but the table file is left in the directory: the
	// temporary file was renamed.
	if m, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// TestKeeper: the keeper writes a new table, not one it has written,
// and the last one when it stops.
func TestKeeper(t *testing.T) {
	pub := publish(t)
	path := filepath.Join(t.TempDir(), "table.cairn")
	k, err := NewKeeper(Config{Path: path, Table: pub, Synced: func() time.Time { return t0 }, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = k.Run(ctx) }()
	wantRev := func(rev uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, err := Load(path)
			if err == nil && s != nil && s.Revision == rev {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("file %v (%v): want revision %d", s, err, rev)
			}
			time.Sleep(5 * time.Millisecond) // polling a file: no signal to wait on
		}
	}
	wantRev(42)
	if _, err := pub.Build(func(b *status.Builder) error { b.SetStoreRevision(43); return nil }); err != nil {
		t.Fatal(err)
	}
	wantRev(43)
	cancel()
	<-done
	if _, err := pub.Build(func(b *status.Builder) error { b.SetStoreRevision(44); return nil }); err != nil {
		t.Fatal(err)
	}
	k.SaveNow()
	wantRev(44)
}

// TestEncodeIsMarshal: the paced encoding, pausing after every element,
// decodes into what json.Marshal's would, with entries and without, and
// is the same bytes each time (save encodes a body twice).
func TestEncodeIsMarshal(t *testing.T) {
	pub := publish(t)
	tbl := pub.Acquire()
	defer tbl.Release()
	full := Take(tbl, t0, t0.Add(time.Second))
	empty := &Snapshot{Revision: 1, Synced: t0, Saved: t0, Capacity: 8}
	var last []byte
	for i, s := range []*Snapshot{full, empty, full} {
		p := pace.New(time.Nanosecond, 0, nil) // due at every check
		var buf bytes.Buffer
		if err := encode(&buf, s, p); err != nil {
			t.Fatal(err)
		}
		body := buf.Bytes()
		if i == 2 && !bytes.Equal(body, last) {
			t.Errorf("a snapshot encoded twice gave two bodies:\n%s\n%s", last, body)
		}
		if i == 0 {
			last = body
		}
		want, _ := json.Marshal(s)
		var a, b Snapshot
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("the paced body does not decode: %v\n%s", err, body)
		}
		_ = json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("paced encoding decodes to\n%+v\nwant\n%+v", a, b)
		}
	}
}

// TestPreviousCopy: each save keeps the table it replaces beside the
// file; LoadKept falls back on it when the file is corrupt or missing,
// and says why; a keeper that starts over a corrupt file does not make
// that file the previous copy.
func TestPreviousCopy(t *testing.T) {
	pub := publish(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "table.cairn")
	prev := path + PreviousSuffix
	newKeeper := func(good bool) *Keeper {
		k, err := NewKeeper(Config{Path: path, Table: pub, Synced: func() time.Time { return t0 }, PathGood: good})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	rev := func(p string) uint64 {
		t.Helper()
		s, err := Load(p)
		if err != nil || s == nil {
			t.Fatalf("%s: %v, %v", p, s, err)
		}
		return s.Revision
	}
	build := func(r uint64) {
		t.Helper()
		if _, err := pub.Build(func(b *status.Builder) error { b.SetStoreRevision(r); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	k := newKeeper(false)
	k.SaveNow()
	if _, err := os.Stat(prev); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a previous copy after the first save: %v", err)
	}
	build(43)
	k.SaveNow()
	if rev(path) != 43 || rev(prev) != 42 {
		t.Fatalf("file %d, previous %d; want 43, 42", rev(path), rev(prev))
	}

	// The file rots: the previous copy serves, and the error says why.
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, good[:len(good)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadKept(path)
	if s == nil || s.Revision != 42 || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), prev) {
		t.Fatalf("LoadKept over a corrupt file: %v, %v; want revision 42 and ErrCorrupt naming %s", s, err, prev)
	}

	// A new keeper over the corrupt file keeps the good previous copy;
	// one over a good file makes it the previous copy.
	build(44)
	newKeeper(false).SaveNow()
	if rev(path) != 44 || rev(prev) != 42 {
		t.Fatalf("after a save over a corrupt file: file %d, previous %d; want 44, 42", rev(path), rev(prev))
	}

	build(45)
	newKeeper(true).SaveNow()
	if rev(path) != 45 || rev(prev) != 44 {
		t.Fatalf("after a save over a good file: file %d, previous %d; want 45, 44", rev(path), rev(prev))
	}

	// The file gone: the previous copy serves.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if s, err := LoadKept(path); s == nil || s.Revision != 44 || err == nil {
		t.Fatalf("LoadKept without the file: %v, %v; want revision 44 and an error", s, err)
	}
	// Both unreadable: nothing, and both reasons.
	for _, p := range []string{path, prev} {
		if err := os.WriteFile(p, []byte("cairn-table 1 3 x\nabc"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := LoadKept(path); s != nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path+":") || !strings.Contains(err.Error(), prev+":") {
		t.Fatalf("LoadKept with both corrupt: %v, %v; want nil and both named", s, err)
	}
	// Neither there: a node that never saved.
	os.Remove(path)
	os.Remove(prev)
	if s, err := LoadKept(path); s != nil || err != nil {
		t.Fatalf("LoadKept with neither: %v, %v; want nil, nil", s, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.link")); len(m) != 0 {
		t.Errorf("links left: %v", m)
	}
}

// TestSaveAllocations: a save of a large table allocates far less than
// its body, which it writes as it encodes instead of holding it (a
// collection marking during a save used to count the whole body, tens
// of megabytes at 100,000 instances), and the file loads back.
func TestSaveAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations differ under the race detector")
	}
	s := &Snapshot{Revision: 7, Synced: t0, Saved: t0, Capacity: 20000, Services: []string{"shop/cart"}}
	for i := range s.Capacity {
		s.Entries = append(s.Entries, SlotEntry{Slot: i,
			Entry:    status.Entry{Key: uint64(i + 1), Incarnation: 1, Service: 1, BaseWeight: 100, Weight: 100},
			Instance: &status.InstanceInfo{ID: "i-" + strconv.Itoa(i), Incarnation: 1, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}})
	}
	path := filepath.Join(t.TempDir(), "table")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := Save(path, s); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(fi.Size())/4 {
		t.Errorf("saving a file of %d bytes allocated %d bytes: it holds the body", fi.Size(), alloc)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != len(s.Entries) || got.Entries[19999].Instance.ID != "i-19999" || got.Revision != 7 {
		t.Errorf("loaded %d entries (revision %d), want %d (revision 7)", len(got.Entries), got.Revision, len(s.Entries))
	}
}

// TestSlotEntryRefusesNamelessValues: a slot whose verdict or lifecycle
// has no name is refused as it is read, not served to fail every answer
// that names it later.
func TestSlotEntryRefusesNamelessValues(t *testing.T) {
	var se SlotEntry
	good := `{"slot":1,"entry":{"Key":7,"Incarnation":1,"Service":1,"Weight":1,"BaseWeight":1,"Region":0,"Zone":0,"Verdict":1,"Lifecycle":1,"Flags":1}}`
	if err := json.Unmarshal([]byte(good), &se); err != nil || se.Entry.Verdict != status.Healthy || se.Entry.Lifecycle != status.Ready {
		t.Fatalf("a good slot: %+v, %v", se, err)
	}
	for name, bad := range map[string]string{
		"verdict":   strings.Replace(good, `"Verdict":1`, `"Verdict":9`, 1),
		"lifecycle": strings.Replace(good, `"Lifecycle":1`, `"Lifecycle":7`, 1),
	} {
		if err := json.Unmarshal([]byte(bad), &se); err == nil || !strings.Contains(err.Error(), "slot 1") {
			t.Errorf("%s without a name: %v; want an error naming the slot", name, err)
		}
	}
}
