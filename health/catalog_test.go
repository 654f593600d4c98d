package health

import (
	"reflect"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestLifecycleMapping: each store lifecycle maps to its own status value
// and back, and anything unknown reads as starting.
func TestLifecycleMapping(t *testing.T) {
	seen := map[status.Lifecycle]bool{}
	for _, l := range []wire.Lifecycle{wire.Starting, wire.Ready, wire.Draining, wire.Terminated} {
		s := lifecycleOf(l)
		if seen[s] {
			t.Errorf("%s maps to %v, as another lifecycle does", l, s)
		}
		seen[s] = true
		if back := storeLifecycle(s); back != l {
			t.Errorf("%s → %v → %s", l, s, back)
		}
	}
	if got := lifecycleOf("bogus"); got != status.Starting {
		t.Errorf("an unknown lifecycle maps to %v, want starting", got)
	}
}

// TestSameServiceSeesEveryField: the directory is kept when sameService
// says nothing changed, so a field it does not compare would never reach
// the readers after the first build.
func TestSameServiceSeesEveryField(t *testing.T) {
	base := status.ServiceInfo{Namespace: "ns", Name: "svc", Ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}},
		DNSTTL: time.Second, ARecordLimit: 8, MinHealthyFraction: 0.5, MaxEjectionPercent: 10}
	if !sameService(base, base) {
		t.Fatal("sameService(a, a) = false")
	}
	typ := reflect.TypeFor[status.ServiceInfo]()
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
			changed.Ports = []status.Port{{Name: "http", Number: 81, Protocol: "tcp"}}
		default:
			t.Fatalf("field %s: kind %s: teach this test to change it", typ.Field(i).Name, f.Kind())
		}
		if sameService(base, changed) {
			t.Errorf("sameService does not compare %s", typ.Field(i).Name)
		}
	}
}
