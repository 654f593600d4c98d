package status

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// layOut lays out one service "ns/web" of the given ids, each in zone
// z1 of r1 at 10.0.0.n, and publishes it.
func layOut(t *testing.T, w *Writer, rev uint64, ids ...string) {
	t.Helper()
	w.Begin(rev, []ServiceInfo{{Namespace: "ns", Name: "web", Ports: []Port{{Name: "http", Number: 80, Protocol: "tcp"}}}})
	for i, id := range ids {
		if _, slot := w.Add(0, Instance{ID: id, Incarnation: 1, Region: "r1", Zone: "z1",
			Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)}, Ports: map[string]int{"http": 8080},
			Verdict: Healthy, Lifecycle: Ready, Flags: Eligible, Weight: 100, BaseWeight: 100}); slot < 0 {
			t.Fatalf("%s: no slot", id)
		}
	}
	w.End()
	if _, err := w.Build(nil); err != nil {
		t.Fatal(err)
	}
}

// TestWriterPublishesLayout: a layout's instances are in the table with
// their entries, their directory and their names; one left out of the
// next layout is gone from it, and its slot is handed out again only
// after a build has written it empty.
func TestWriterPublishesLayout(t *testing.T) {
	pub, err := New(Config{Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(pub, WriterConfig{})
	layOut(t, w, 5, "a", "b")
	tb := pub.Acquire()
	svc, ok := tb.Services().ID("ns/web")
	if !ok || len(tb.Members(svc)) != 2 || tb.StoreRevision() != 5 {
		t.Fatalf("service %v, members %v, revision %d", ok, tb.Members(svc), tb.StoreRevision())
	}
	slot, ok := tb.Directory().SlotOf("b.web.ns")
	e := tb.Entry(int(slot))
	if !ok || e.Key != KeyHash("ns/web/b") || e.Weight != 100 || !e.Flags.Has(Eligible) || tb.Locality(e.Zone) != "z1" {
		t.Errorf("b: slot %d (%v), entry %+v", slot, ok, e)
	}
	if in := tb.Directory().Instance(int(slot)); in.Addrs[0] != netip.MustParseAddr("10.0.0.2") || in.Ports["http"] != 8080 {
		t.Errorf("b's directory entry: %+v", in)
	}
	tb.Release()

	// b goes and c comes in the same layout: the table is full until
	// b's slot has been written empty.
	var dropped []string
	w.dropped = func(k string, err error) { dropped = append(dropped, k) }
	layOut2 := func(ids ...string) {
		w.Begin(6, []ServiceInfo{{Namespace: "ns", Name: "web"}})
		for _, id := range ids {
			w.Add(0, Instance{ID: id, Incarnation: 1, Lifecycle: Ready})
		}
		w.End()
		if _, err := w.Build(nil); err != nil {
			t.Fatal(err)
		}
	}
	layOut2("a", "c")
	if len(dropped) != 1 || dropped[0] != "ns/web/c" {
		t.Fatalf("dropped %v, want ns/web/c (b's slot not recycled yet)", dropped)
	}
	layOut2("a", "c")
	if len(dropped) != 1 {
		t.Fatalf("dropped %v after b's slot was written empty", dropped)
	}
	tb = pub.Acquire()
	defer tb.Release()
	if _, ok := tb.Directory().SlotOf("b.web.ns"); ok {
		t.Errorf("b is still in the directory")
	}
	if _, ok := tb.Directory().SlotOf("c.web.ns"); !ok {
		t.Errorf("c is not in the directory")
	}
}

// TestWriterReusesLayout: a layout that changes no instance's identity
// keeps the Directory (and each InstanceInfo) and the writer's per-slot
// arrays, and hands back the key strings it holds; the fill of a Build
// rewrites the state of the entries only.
func TestWriterReusesLayout(t *testing.T) {
	pub, err := New(Config{Capacity: 16})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(pub, WriterConfig{})
	layOut(t, w, 1, "a", "b", "c")
	dir, refs, state := w.dir, &w.refs[0], &w.state[0]
	for rev := uint64(2); rev < 8; rev++ {
		layOut(t, w, rev, "a", "b", "c")
	}
	if w.dir != dir || &w.refs[0] != refs || &w.state[0] != state {
		t.Errorf("an unchanged layout made a new directory (%v) or per-slot arrays (%v, %v)",
			w.dir != dir, &w.refs[0] != refs, &w.state[0] != state)
	}
	_, err = w.Build(func(slot int, ref Ref, e *Entry) { e.Verdict, e.Flags, e.Weight = Unhealthy, 0, 0 })
	if err != nil {
		t.Fatal(err)
	}
	tb := pub.Acquire()
	defer tb.Release()
	for _, slot := range tb.Members(1) {
		if e := tb.Entry(int(slot)); e.Verdict != Unhealthy || e.Weight != 0 || e.Key == 0 || e.BaseWeight != 100 {
			t.Errorf("slot %d after a fill: %+v", slot, e)
		}
	}
}

// TestWriterLayoutAllocations: a layout allocates nothing per instance
// it had before (the race detector's allocations aside: make test runs
// this without it).
func TestWriterLayoutAllocations(t *testing.T) {
	pub, err := New(Config{Capacity: 16})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(pub, WriterConfig{})
	measure := func(n int) float64 {
		services := []ServiceInfo{{Namespace: "ns", Name: "web"}}
		ins := make([]Instance, n)
		for i := range ins {
			ins[i] = Instance{ID: fmt.Sprintf("i%d", i), Incarnation: 1, Addresses: []string{"10.0.0.1"}, Ports: map[string]int{"http": 1}}
		}
		lay := func() {
			w.Begin(1, services)
			for _, in := range ins {
				w.Add(0, in)
			}
			w.End()
			if _, err := w.Build(nil); err != nil {
				t.Fatal(err)
			}
		}
		lay()
		lay()
		return testing.AllocsPerRun(5, lay)
	}
	small, large := measure(1), measure(10)
	if large > small {
		t.Errorf("a layout of 10 instances it had allocates %.0f times, of 1 instance %.0f: want no more", large, small)
	}
}

// TestSameServiceSeesEveryField: the directory is kept when sameService
// says nothing changed, so a field it does not compare would never reach
// the readers after the first build.
func TestSameServiceSeesEveryField(t *testing.T) {
	base := ServiceInfo{Namespace: "ns", Name: "svc", Ports: []Port{{Name: "http", Number: 80, Protocol: "tcp"}},
		DNSTTL: time.Second, ARecordLimit: 8, MinHealthyFraction: 0.5, MaxEjectionPercent: 10}
	if !sameService(base, base) {
		t.Fatal("sameService(a, a) = false")
	}
	typ := reflect.TypeFor[ServiceInfo]()
	for i := range typ.NumField() {
		changed := base
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Float64:
			f.SetFloat(f.Float() + 0.25)
		case reflect.Slice:
			changed.Ports = []Port{{Name: "http", Number: 81, Protocol: "tcp"}}
		default:
			t.Fatalf("field %s: kind %s: teach this test to change it", typ.Field(i).Name, f.Kind())
		}
		if sameService(base, changed) {
			t.Errorf("sameService does not compare %s", typ.Field(i).Name)
		}
	}
}

// TestLocalityNamesReclaimed: a zone whose last instance went is no
// longer named in the next table, so that locality ids (16 bits) never
// run out however many zones were ever used; a set that did not change
// keeps its Names.
func TestLocalityNamesReclaimed(t *testing.T) {
	a := intern(nil, []string{"r1", "za", "r1", "zb"})
	if _, ok := a.ID("zb"); !ok || a.Len() != 4 { // the empty name, then r1, za, zb
		t.Fatalf("names of r1, za, zb: %d names, zb named %v", a.Len(), ok)
	}
	if b := intern(a, []string{"zb", "r1", "za", "za"}); b != a {
		t.Errorf("the same set made new Names")
	}
	c := intern(a, []string{"r1", "za"})
	if _, ok := c.ID("zb"); ok {
		t.Errorf("zb is still named after its last instance went")
	}
	for i := range 70000 { // more zones than 16-bit ids, over time
		c = intern(c, []string{"r1", fmt.Sprintf("z%d", i)})
	}
	if c.Len() != 3 {
		t.Errorf("after 70000 zones came and went: %d names, want 3", c.Len())
	}
}
