package status

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func TestEntryLayout(t *testing.T) {
	if got := unsafe.Sizeof(Entry{}); got != 32 {
		t.Errorf("Entry is %d bytes; want 32 (two to a cache line)", got)
	}
	// A pointer anywhere in Entry would make the GC scan every table.
	typ := reflect.TypeFor[Entry]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		switch f.Type.Kind() {
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			t.Errorf("Entry.%s is a %s; want a fixed-size integer", f.Name, f.Type)
		}
	}
	if (Entry{}).Used() {
		t.Error("the zero Entry is used")
	}
	if z := (Entry{}); z.Flags.Has(Eligible) || z.Weight != 0 || z.Verdict != Unknown || z.Lifecycle != Starting {
		t.Errorf("zero Entry = %+v; want unknown, starting, not eligible", z)
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		got  interface{ String() string }
		want string
	}{
		{Unknown, "unknown"},
		{Healthy, "healthy"},
		{Degraded, "degraded"},
		{Unhealthy, "unhealthy"},
		{Quarantined, "quarantined"},
		{Verdict(9), "verdict(9)"},
		{Starting, "starting"},
		{Ready, "ready"},
		{Draining, "draining"},
		{Terminated, "terminated"},
		{Lifecycle(4), "lifecycle(4)"},
		{Flags(0), "0"},
		{Eligible, "eligible"},
		{Eligible | SlowStart, "eligible|slow_start"},
		{HealthDisregarded | DependencyDegraded | LeaseExpired | WithdrawalDeferred,
			"health_disregarded|dependency_degraded|lease_expired|withdrawal_deferred"},
		{Eligible | PeerStale, "eligible|peer_stale"},
		{OutcomeDegraded, "outcome_degraded"},
		{Flags(0xc0), "outcome_degraded|peer_stale"},
	}
	for _, tt := range tests {
		if got := tt.got.String(); got != tt.want {
			t.Errorf("%#v.String() = %q; want %q", tt.got, got, tt.want)
		}
	}
}

func TestFlagsHas(t *testing.T) {
	f := Eligible | SlowStart
	if !f.Has(Eligible) || !f.Has(Eligible|SlowStart) || f.Has(Eligible|LeaseExpired) || !f.Has(0) {
		t.Errorf("Has is wrong for %v", f)
	}
}

func TestNames(t *testing.T) {
	n := NewNames("eu-west", "", "eu-west-1a", "eu-west")
	if n.Len() != 3 {
		t.Fatalf("Len = %d; want 3 (the empty name, eu-west, eu-west-1a)", n.Len())
	}
	for _, tt := range []struct {
		id   uint32
		name string
	}{{0, ""}, {1, "eu-west"}, {2, "eu-west-1a"}} {
		if got := n.Name(tt.id); got != tt.name {
			t.Errorf("Name(%d) = %q; want %q", tt.id, got, tt.name)
		}
		if id, ok := n.ID(tt.name); !ok || id != tt.id {
			t.Errorf("ID(%q) = %d, %v; want %d", tt.name, id, ok, tt.id)
		}
	}
	if got := n.Name(3); got != "" {
		t.Errorf("Name(3) = %q; want \"\" out of range", got)
	}
	if _, ok := n.ID("us-east"); ok {
		t.Error("ID(us-east) found")
	}
	var none *Names
	if none.Len() != 1 || none.Name(0) != "" || none.Name(1) != "" {
		t.Error("nil Names is not just the empty name")
	}
	if id, ok := none.ID(""); !ok || id != 0 {
		t.Error("nil Names has no empty name")
	}
	if _, ok := none.ID("x"); ok {
		t.Error("nil Names has x")
	}
}

// TestText: every verdict and lifecycle marshals to its SPEC name and
// back; other text and nameless values are errors naming them; Flags
// stay a number in JSON.
func TestText(t *testing.T) {
	for v := Unknown; v <= Quarantined; v++ {
		b, err := v.MarshalText()
		var back Verdict
		if err != nil || string(b) != v.String() || back.UnmarshalText(b) != nil || back != v {
			t.Errorf("verdict %d: %q, %v; back %v", v, b, err, back)
		}
	}
	for l := Starting; l <= Terminated; l++ {
		b, err := l.MarshalText()
		var back Lifecycle
		if err != nil || string(b) != l.String() || back.UnmarshalText(b) != nil || back != l {
			t.Errorf("lifecycle %d: %q, %v; back %v", l, b, err, back)
		}
	}
	for _, bad := range []string{"", "Healthy", "eligible", "ready ", "suspect"} {
		if _, err := ParseVerdict(bad); err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("ParseVerdict(%q) = %v; want an error naming it", bad, err)
		}
		// Decoding is forgiving: a newer server's verdict reads as unknown.
		back := Healthy
		if err := back.UnmarshalText([]byte(bad)); err != nil || back != Unknown {
			t.Errorf("UnmarshalText(%q) = %v, %v; want unknown, no error", bad, back, err)
		}
	}
	for _, bad := range []string{"", "Ready", "healthy", "stopped"} {
		if _, err := ParseLifecycle(bad); err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("ParseLifecycle(%q) = %v; want an error naming it", bad, err)
		}
	}
	if _, err := Verdict(5).MarshalText(); err == nil || !strings.Contains(err.Error(), "verdict(5)") {
		t.Errorf("Verdict(5).MarshalText: %v", err)
	}
	if _, err := Lifecycle(4).MarshalText(); err == nil || !strings.Contains(err.Error(), "lifecycle(4)") {
		t.Errorf("Lifecycle(4).MarshalText: %v", err)
	}
	var v struct {
		V Verdict
		L Lifecycle
		F Flags
	}
	if err := json.Unmarshal([]byte(`{"V":"degraded","L":"draining","F":21}`), &v); err != nil || v.V != Degraded || v.L != Draining || v.F != 21 {
		t.Errorf("decoded %+v, %v", v, err)
	}
	if b, _ := json.Marshal(v); string(b) != `{"V":"degraded","L":"draining","F":21}` {
		t.Errorf("encoded %s", b)
	}
	if err := json.Unmarshal([]byte(`{"V":"sick"}`), &v); err != nil || v.V != Unknown {
		t.Errorf("a verdict this version does not know: %v, %v; want unknown", v.V, err)
	}
	if err := json.Unmarshal([]byte(`{"L":"paused"}`), &v); err == nil || !strings.Contains(err.Error(), `"paused"`) {
		t.Errorf("an unknown lifecycle decoded: %v", err)
	}
	for f := range 256 {
		want := []string{}
		if f != 0 {
			want = strings.Split(Flags(f).String(), "|")
		}
		if got := Flags(f).Names(); !reflect.DeepEqual(got, want) {
			t.Errorf("Flags(%#x).Names() = %q; want %q", f, got, want)
		}
	}
}
