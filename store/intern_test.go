package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"github.com/cairn-sd/cairn/wire"
)

// sameString reports whether a and b are one copy, not just equal.
func sameString(a, b string) bool {
	return a == b && (len(a) == 0 || unsafe.StringData(a) == unsafe.StringData(b))
}

// sameMap reports whether a and b are one map.
func sameMap[K comparable, V any](a, b map[K]V) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestRecordsShareWhatTheyRepeat: instances of a service keep one copy
// of its name, of their registrar and of equal ports, and a restored
// replica shares them again, with every value unchanged.
func TestRecordsShareWhatTheyRepeat(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	for i, id := range []string{"a", "b", "c"} {
		l.must(registerCmd(id, fmt.Sprint("10.0.0.", i+1)))
	}
	other := registerCmd("d", "10.0.0.9")
	other.Register.Ports = map[string]int{"http": 8081}
	l.must(other)

	check := func(f *fsm, where string) {
		t.Helper()
		f.mu.RLock()
		defer f.mu.RUnlock()
		svc := f.services[wire.ServiceKey{Namespace: "prod", Name: "web"}]
		a, b, c, d := f.instances.get(webKey("a")), f.instances.get(webKey("b")), f.instances.get(webKey("c")), f.instances.get(webKey("d"))
		for _, in := range []*record{a, b, c, d} {
			if in.svc != a.svc || !sameString(in.svc.Namespace, svc.Namespace) || !sameString(in.svc.Name, svc.Name) {
				t.Errorf("%s: %s does not share the service's names", where, in.id)
			}
			if in.origin != a.origin {
				t.Errorf("%s: %s does not share the locality and registrar", where, in.id)
			}
		}
		if !sameMap(a.ports, b.ports) || !sameMap(b.ports, c.ports) {
			t.Errorf("%s: equal ports are separate maps", where)
		}
		if sameMap(c.ports, d.ports) || d.ports["http"] != 8081 || c.ports["http"] != 8080 {
			t.Errorf("%s: ports c %v, d %v, want 8080 and 8081 in maps of their own", where, c.ports, d.ports)
		}
	}
	check(l.f, "applied")
	restored := newFSM()
	roundTrip(t, l.f, restored)
	check(restored, "restored")
	if got, want := restored.state(), l.f.state(); !reflect.DeepEqual(got, want) {
		t.Errorf("restore changed the state: %s", firstDiff(got, want))
	}
}

// TestInternerStartsAfreshWhenFull: the table is bounded, and strings
// seen once cannot keep a common one from being shared for good.
func TestInternerStartsAfreshWhenFull(t *testing.T) {
	var in interner
	for i := range maxInterned + 10 {
		in.str(fmt.Sprint("once-", i))
		if len(in.m) > maxInterned {
			t.Fatalf("%d strings interned, want at most %d", len(in.m), maxInterned)
		}
	}
	common := in.str(string([]byte("common")))
	if got := in.str(string([]byte("common"))); !sameString(got, common) {
		t.Error("a string interned after the table filled up is not shared")
	}
	if got := in.str(""); got != "" {
		t.Errorf("str(\"\") = %q", got)
	}
}

// TestWriteStateIsJSON: the snapshot written a piece at a time is the
// document json.Marshal makes of the whole state, so Restore reads it as
// before and older snapshots stay readable.
func TestWriteStateIsJSON(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	for i := range 5 {
		l.must(registerCmd(fmt.Sprint("i", i), fmt.Sprint("10.0.0.", i+1)))
	}
	l.must(reportCmd("i1", 2, wire.Report{Ready: true}))
	without := l.f.state()
	l.must(command{Op: opEvacuate, Actor: "ops", Evacuate: &wire.EvacuateRequest{Zone: "a", Reason: "power", Force: true}})
	for _, st := range []fsmState{without, l.f.state(), newFSM().state()} {
		var got bytes.Buffer
		if err := writeState(&got, &st, len(st.Instances), func(i int) wire.Instance { return st.Instances[i] }); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, got.Bytes()); err != nil {
			t.Fatalf("writeState wrote invalid JSON: %v\n%s", err, got.Bytes())
		}
		if !bytes.Equal(compact.Bytes(), want) {
			t.Errorf("writeState wrote\n%s\nwant\n%s", compact.Bytes(), want)
		}
	}
}
