package dnsserver

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
	"unsafe"
)

// rrlFor is a limiter of cfg (defaults applied) and its epoch.
func rrlFor(t *testing.T, cfg RRLConfig) (*rrl, time.Time) {
	t.Helper()
	c := Config{RRL: cfg}
	c.setDefaults()
	if err := c.RRL.validate(); err != nil {
		t.Fatal(err)
	}
	epoch := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return newRRL(c.RRL, epoch), epoch
}

// verdicts sends n responses to a at now and counts what became of them.
func verdicts(r *rrl, a netip.Addr, now time.Time, n int) (pass, slip, drop int) {
	for range n {
		switch r.account(a, now) {
		case rrlPass:
			pass++
		case rrlSlip:
			slip++
		case rrlDrop:
			drop++
		}
	}
	return
}

// The allowance is Burst at once, then Rate a second; past it every
// Slip-th limited response slips, the others are dropped.
func TestRRLRateBurstSlip(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	for _, c := range []struct {
		slip                 int
		wantSlip, wantDrop   int // of 30 limited
		wantSlip2, wantDrop2 int // of the 95 limited in the second round
	}{
		{2, 15, 15, 47, 48},
		{1, 30, 0, 95, 0},
		{3, 10, 20, 31, 64},
		{NoSlip, 0, 30, 0, 95},
	} {
		t.Run(fmt.Sprintf("slip %d", c.slip), func(t *testing.T) {
			r, now := rrlFor(t, RRLConfig{Rate: 10, Burst: 20, Slip: c.slip})
			if p, s, d := verdicts(r, a, now, 50); p != 20 || s != c.wantSlip || d != c.wantDrop {
				t.Errorf("50 at once: %d passed, %d slipped, %d dropped; want 20, %d, %d", p, s, d, c.wantSlip, c.wantDrop)
			}
			// Half a second refills five.
			now = now.Add(500 * time.Millisecond)
			if p, s, d := verdicts(r, a, now, 100); p != 5 || s != c.wantSlip2 || d != c.wantDrop2 {
				t.Errorf("100 half a second later: %d passed, %d slipped, %d dropped; want 5, %d, %d", p, s, d, c.wantSlip2, c.wantDrop2)
			}
			// At the rate, every one passes; a long quiet spell refills
			// the burst, not more.
			for range 30 {
				now = now.Add(100 * time.Millisecond)
				if v := r.account(a, now); v != rrlPass {
					t.Fatalf("at the rate: verdict %d", v)
				}
			}
			now = now.Add(time.Hour)
			if p, _, _ := verdicts(r, a, now, 50); p != 20 {
				t.Errorf("an hour later: %d passed, want the burst, 20", p)
			}
		})
	}
}

// Addresses are counted by prefix: /24 and /56 by default, configurable,
// one family apart from the other.
func TestRRLPrefixes(t *testing.T) {
	for _, c := range []struct {
		name     string
		cfg      RRLConfig
		a, b     string
		together bool
	}{
		{"one /24", RRLConfig{}, "192.0.2.1", "192.0.2.254", true},
		{"two /24s", RRLConfig{}, "192.0.2.1", "192.0.3.1", false},
		{"one /56", RRLConfig{}, "2001:db8:0:ab00::1", "2001:db8:0:abff:ffff::9", true},
		{"two /56s", RRLConfig{}, "2001:db8:0:ab00::1", "2001:db8:0:ac00::1", false},
		{"/32: two addresses", RRLConfig{IPv4Prefix: 32}, "127.0.0.1", "127.0.0.2", false},
		{"/20", RRLConfig{IPv4Prefix: 20}, "10.1.0.1", "10.1.15.1", true},
		{"/20, the next one", RRLConfig{IPv4Prefix: 20}, "10.1.0.1", "10.1.16.1", false},
		{"/64", RRLConfig{IPv6Prefix: 64}, "2001:db8::1", "2001:db8::2:1", true},
		{"/128", RRLConfig{IPv6Prefix: 128}, "2001:db8::1", "2001:db8::2", false},
		{"the families apart", RRLConfig{IPv4Prefix: 8, IPv6Prefix: 8}, "32.0.0.0", "2000::", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Rate, c.cfg.Burst = 1, 5
			r, now := rrlFor(t, c.cfg)
			a, b := netip.MustParseAddr(c.a), netip.MustParseAddr(c.b)
			verdicts(r, a, now, 5)
			p, _, _ := verdicts(r, b, now, 5)
			if together := p == 0; together != c.together {
				t.Errorf("%s then %s: the second had %d of 5 passed; want them counted together: %v", a, b, p, c.together)
			}
		})
	}
}

// Exempt sources are never limited, nor counted against their prefix.
func TestRRLExempt(t *testing.T) {
	r, now := rrlFor(t, RRLConfig{Rate: 1, Burst: 1, Exempt: []netip.Prefix{netip.MustParsePrefix("192.0.2.53/32")}})
	if p, _, _ := verdicts(r, netip.MustParseAddr("192.0.2.53"), now, 100); p != 100 {
		t.Errorf("exempt source: %d of 100 passed", p)
	}
	if p, _, _ := verdicts(r, netip.MustParseAddr("192.0.2.1"), now, 2); p != 1 {
		t.Errorf("its prefix: %d of 2 passed, want 1", p)
	}
}

// The table has the size it was given, whatever the number of sources,
// and accounting allocates nothing. Flooded with a million sources of one
// response each (/32s), a prefix that keeps sending is still limited: its
// cell's tat is the latest of its bucket, and a newcomer takes another.
// (Sources that each exhaust their own allowance can push it out: the
// table is lossy, and that prefix then starts again from a full burst.)
func TestRRLTableIsFixed(t *testing.T) {
	r, now := rrlFor(t, RRLConfig{Rate: 10, Burst: 10, TableSize: 3 * 1024, Slip: NoSlip, IPv4Prefix: 32})
	if len(r.buckets) != 1024 {
		t.Fatalf("%d buckets, want 1024", len(r.buckets))
	}
	victim := netip.MustParseAddr("198.51.100.7")
	verdicts(r, victim, now, 10)
	buckets := &r.buckets[0]
	for i := range 1 << 20 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		r.account(a, now)
		if i%1000 == 0 {
			if p, _, _ := verdicts(r, victim, now, 1); p != 0 {
				t.Fatalf("after %d other sources the flooded prefix was answered", i)
			}
		}
	}
	if &r.buckets[0] != buckets || len(r.buckets) != 1024 {
		t.Fatal("the table was reallocated")
	}
	a := netip.MustParseAddr("2001:db8::1")
	if n := testing.AllocsPerRun(1000, func() { r.account(a, now); r.account(victim, now) }); n != 0 {
		t.Errorf("%v allocations per response", n)
	}
	for _, c := range []struct{ size, buckets int }{{1, 1}, {3, 1}, {4, 2}, {49152, 16384}, {49153, 32768}} {
		r, _ := rrlFor(t, RRLConfig{TableSize: c.size})
		if len(r.buckets) != c.buckets {
			t.Errorf("TableSize %d: %d buckets, want %d", c.size, len(r.buckets), c.buckets)
		}
	}
}

// A bucket is one cache line.
func TestRRLBucketSize(t *testing.T) {
	if n := unsafe.Sizeof(rrlBucket{}); n != 64 {
		t.Fatalf("a bucket is %d octets, want 64", n)
	}
}

func TestModeEnabled(t *testing.T) {
	for _, c := range []struct {
		mode Mode
		addr string
		want bool
	}{
		{ModeAuto, "127.0.0.1:53", false},
		{ModeAuto, "127.9.9.9:53", false},
		{ModeAuto, "[::1]:53", false},
		{ModeAuto, "[::ffff:127.0.0.1]:53", false},
		{ModeAuto, "localhost:53", false},
		{ModeAuto, "0.0.0.0:53", true},
		{ModeAuto, ":53", true},
		{ModeAuto, "[::]:53", true},
		{ModeAuto, "10.0.0.1:53", true},
		{ModeAuto, "dns.example:53", true},
		{ModeOn, "127.0.0.1:53", true},
		{ModeOff, "10.0.0.1:53", false},
	} {
		if got := c.mode.enabled(c.addr); got != c.want {
			t.Errorf("%v on %s: %v, want %v", c.mode, c.addr, got, c.want)
		}
	}
	for _, s := range []string{"auto", "on", "off"} {
		if m, err := ParseMode(s); err != nil || m.String() != s {
			t.Errorf("ParseMode(%q): %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("yes"); err == nil {
		t.Error(`ParseMode("yes") did not fail`)
	}
}

func TestRRLConfigValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		rrl  RRLConfig
		ok   bool
	}{
		{"defaults", RRLConfig{}, true},
		{"a huge rate", RRLConfig{Rate: 100_000_000}, true},
		{"the highest rate, its default burst", RRLConfig{Rate: 1_000_000_000}, true},
		{"too huge", RRLConfig{Rate: 2_000_000_000}, false},
		{"too big a burst", RRLConfig{Burst: 2_000_000_001}, false},
		{"negative rate", RRLConfig{Rate: -1}, false},
		{"slip 100", RRLConfig{Slip: 100}, true},
		{"slip 101", RRLConfig{Slip: 101}, false},
		{"NoSlip", RRLConfig{Slip: NoSlip}, true},
		{"slip -2", RRLConfig{Slip: -2}, false},
		{"/33", RRLConfig{IPv4Prefix: 33}, false},
		{"/129", RRLConfig{IPv6Prefix: 129}, false},
		{"a huge table", RRLConfig{TableSize: 1<<24 + 1}, false},
		{"an invalid exemption", RRLConfig{Exempt: []netip.Prefix{{}}}, false},
		{"an unknown mode", RRLConfig{Mode: 7}, false},
	} {
		cfg := Config{RRL: c.rrl}
		cfg.setDefaults()
		if err := cfg.RRL.validate(); (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	for _, c := range []struct {
		name string
		c    CookieConfig
		ok   bool
	}{
		{"none", CookieConfig{}, true},
		{"16 octets", CookieConfig{Secret: make([]byte, 16)}, true},
		{"15 octets", CookieConfig{Secret: make([]byte, 15)}, false},
		{"a previous one", CookieConfig{Secret: make([]byte, 16), PreviousSecret: make([]byte, 16)}, true},
		{"a previous one only", CookieConfig{PreviousSecret: make([]byte, 16)}, false},
		{"a short previous one", CookieConfig{Secret: make([]byte, 16), PreviousSecret: make([]byte, 17)}, false},
	} {
		if err := c.c.validate(); (err == nil) != c.ok {
			t.Errorf("cookies, %s: %v", c.name, err)
		}
	}
}
