package callers

import (
	"fmt"
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// sends returns requests at the given seconds to addr, all of result r.
func sends(addr string, r Result, secs ...float64) []Request {
	var out []Request
	for _, s := range secs {
		out = append(out, Request{At: at(s), Addr: addr, Result: r})
	}
	return out
}

func TestBuckets(t *testing.T) {
	recs := []Record{
		{Caller: "d1", Kind: DNSDirect, Requests: append(sends("a:1", Success, 0.1, 0.5, 1.2), sends("b:1", Failure, 1.3)...)},
		{Caller: "d2", Kind: DNSDirect, Requests: append(sends("a:1", Timeout, 1.9), sends("a:1", Success, 3.5, 9)...)},
		{Caller: "g1", Kind: GRPCXDS, Requests: sends("a:1", Success, 0.2)},
	}
	b := Buckets(recs, t0, at(4), time.Second)
	d := b[DNSDirect]
	if len(d) != 4 {
		t.Fatalf("%d buckets, want 4 (the request at 9 s is past the end)", len(d))
	}
	want := []Bucket{{T: 0, Sent: 2}, {T: 1, Sent: 3, Failed: 1, TimedOut: 1}, {T: 2}, {T: 3, Sent: 1}}
	for i, w := range want {
		if d[i] != w {
			t.Errorf("bucket %d: %+v, want %+v", i, d[i], w)
		}
	}
	rates := ErrorRates(recs, t0, at(4), time.Second)
	if got := rates[DNSDirect][1]; got.T != 1 || fmt.Sprintf("%.3f", got.V) != "0.667" {
		t.Errorf("error rate of second 1: %+v, want 2/3", got)
	}
	if got := rates[DNSDirect][2].V; !math.IsNaN(got) {
		t.Errorf("error rate of an empty second: %v, want NaN (no data)", got)
	}
	if got := rates[GRPCXDS]; len(got) != 4 || got[0].V != 0 || !math.IsNaN(got[1].V) {
		t.Errorf("grpc series %+v", got)
	}
}

func TestStopTime(t *testing.T) {
	target := Target{ID: "i-1", Addr: "127.11.0.1:80"}
	fault, end := at(10), at(60)
	var recs []Record
	// 100 callers: caller k last sends to the target k/10 s after the
	// fault (0: never after it).
	for k := range 100 {
		r := Record{Caller: fmt.Sprintf("c%02d", k), Kind: DNSDirect,
			Requests: sends(target.Addr, Success, 1, 5, 9.9)}
		if k > 0 {
			r.Requests = append(r.Requests, sends(target.Addr, Failure, 10+float64(k)/10)...)
		}
		// Sends elsewhere do not count.
		r.Requests = append(r.Requests, sends("127.11.0.2:80", Success, 59)...)
		recs = append(recs, r)
	}
	c := StopTime(recs, target, fault, end, 2*time.Second)
	if !c.Converged || c.Callers != 100 {
		t.Fatalf("%+v, want converged over 100", c)
	}
	// Nearest rank: the 99th of 100 sorted values, 9.8 s.
	if c.P99 != 9800*time.Millisecond {
		t.Errorf("p99 %v, want 9.8s", c.P99)
	}
	if c.Last["c00"] != 0 {
		t.Errorf("a caller that never sent after the fault: %v, want 0", c.Last["c00"])
	}

	// Matched by instance id too (an answer from it, no address).
	recs[99].Requests = append(recs[99].Requests, Request{At: at(30), Instance: "i-1"})
	if c := StopTime(recs, target, fault, end, 2*time.Second); c.Last["c99"] != 20*time.Second || c.P99 != 9800*time.Millisecond {
		t.Errorf("one late caller of 100: last %v, p99 %v; want 20s and still 9.8s", c.Last["c99"], c.P99)
	}

	// Two callers still sending at the end: over 1% of them, not converged.
	recs[98].Requests = append(recs[98].Requests, sends(target.Addr, Failure, 59.5)...)
	recs[97].Requests = append(recs[97].Requests, sends(target.Addr, Failure, 58.5)...)
	c = StopTime(recs, target, fault, end, 2*time.Second)
	if c.Converged || len(c.StillSending) != 2 || c.StillSending[0] != "c97" {
		t.Errorf("%+v, want not converged, c97 and c98 still sending", c.StillSending)
	}
	if c := StopTime(nil, target, fault, end, time.Second); c.Converged {
		t.Error("no callers converged")
	}
}

func TestTransitionsAndPresence(t *testing.T) {
	a, b := "127.11.0.1:80", "127.12.0.1:80"
	target := Target{ID: "i-1", Addr: a}
	recs := []Record{
		// A DNS caller: withdrawn at 2.5 s, admitted again at 6.2 s.
		{Caller: "d1", Kind: DNSDirect, Views: []View{
			{At: at(0.1), Addrs: []string{a, b}},
			{At: at(2.5), Addrs: []string{b}},
			{At: at(6.2), Addrs: []string{a, b}},
		}},
		// Another never given it.
		{Caller: "d2", Kind: DNSDirect, Views: []View{{At: at(0.2), Addrs: []string{b}}}},
		// An Envoy caller: seen by where it sent, per second.
		{Caller: "e1", Kind: Envoy, Requests: []Request{
			{At: at(0.5), Instance: "i-1"}, {At: at(1.5), Instance: "i-1"}, {At: at(2.5), Instance: "i-2"},
			{At: at(7.5), Instance: "i-1"},
		}},
	}
	trs := Transitions(recs, target, t0, at(8), time.Second)
	want := []Transition{
		{"e1", Envoy, at(2), false}, {"d1", DNSDirect, at(2.5), false},
		{"d1", DNSDirect, at(6.2), true}, {"e1", Envoy, at(7), true},
	}
	if fmt.Sprint(trs) != fmt.Sprint(want) {
		t.Errorf("transitions\n%v\nwant\n%v", trs, want)
	}
	p := Presence(recs, target, t0, at(8), time.Second)
	var dns, env []float64
	for _, pt := range p[DNSDirect] {
		dns = append(dns, pt.V)
	}
	for _, pt := range p[Envoy] {
		env = append(env, pt.V)
	}
	if fmt.Sprint(dns) != "[0.5 0.5 0 0 0 0 0.5 0.5]" {
		t.Errorf("DNS presence %v", dns)
	}
	if fmt.Sprint(env) != "[1 1 0 0 0 0 0 1]" {
		t.Errorf("Envoy presence %v", env)
	}
	if p[DNSDirect][0].T != 1 {
		t.Errorf("presence is sampled at each interval's end, got t=%v", p[DNSDirect][0].T)
	}
}

// TestStopTimeBlind: an Envoy caller's last send is when the target left
// its Envoy's view, or its last answer from it if later; one whose view
// still holds it has not stopped; one without views is unknown; one
// whose first view comes after the fault is judged from that view.
func TestStopTimeBlind(t *testing.T) {
	a, b := "127.11.0.1:80", "127.12.0.1:80"
	target := Target{ID: "w-1", Addr: a}
	fault, end := at(10), at(30)
	recs := []Record{
		{Caller: "e1", Kind: Envoy, Blind: true,
			Requests: []Request{{At: at(9), Instance: "w-1"}, {At: at(10.5), Instance: "w-1"}},
			Views:    []View{{At: at(1), Addrs: []string{a, b}}, {At: at(13), Addrs: []string{b}}}},
		{Caller: "e3", Kind: Envoy, Blind: true, Views: []View{{At: at(1), Addrs: []string{b}}}},
		{Caller: "e5", Kind: Envoy, Blind: true, Views: []View{{At: at(12), Addrs: []string{a, b}}, {At: at(15), Addrs: []string{b}}}},
		{Caller: "e6", Kind: Envoy, Blind: true, Views: []View{{At: at(11), Addrs: []string{b}}}},
	}
	c := StopTime(recs, target, fault, end, time.Second)
	if c.Last["e1"] != 3*time.Second || c.Last["e3"] != 0 || c.Last["e5"] != 5*time.Second || c.Last["e6"] != time.Second || !c.Converged {
		t.Errorf("%+v", c)
	}
	recs = append(recs, Record{Caller: "e2", Kind: Envoy, Blind: true, Requests: []Request{{At: at(11), Instance: "w-1"}}})
	if c := StopTime(recs, target, fault, end, time.Second); c.Converged || fmt.Sprint(c.Unknown) != "[e2]" {
		t.Errorf("a caller without views: %+v, want unknown, not converged", c)
	}
	recs = append(recs[:4], Record{Caller: "e4", Kind: Envoy, Blind: true, Views: []View{{At: at(1), Addrs: []string{a, b}}}})
	if c := StopTime(recs, target, fault, end, time.Second); c.Converged || len(c.StillSending) != 1 || c.StillSending[0] != "e4" {
		t.Errorf("a caller whose Envoy still holds the target: %+v", c)
	}
}

// TestStopTimeUnknown: a caller that sent nothing anywhere after
// fault+quiet (stuck, or its resolution failing) has not shown it
// stopped: it is unknown, and counted as not stopped.
func TestStopTimeUnknown(t *testing.T) {
	target := Target{ID: "i-1", Addr: "127.11.0.1:80"}
	fault, end := at(10), at(60)
	recs := []Record{
		{Caller: "ok", Kind: DNSDirect, Requests: append(sends(target.Addr, Success, 9), sends("127.11.0.2:80", Success, 30)...)},
		{Caller: "stuck", Kind: DNSDirect, Requests: sends(target.Addr, Success, 9)},
		{Caller: "unresolved", Kind: DNSDirect, Requests: append(sends(target.Addr, Success, 9), sends("", Failure, 20, 30, 40)...)},
	}
	c := StopTime(recs, target, fault, end, 2*time.Second)
	if c.Converged || fmt.Sprint(c.Unknown) != "[stuck unresolved]" || c.Last["ok"] != 0 {
		t.Errorf("%+v, want not converged, stuck and unresolved unknown", c)
	}
	if _, ok := c.Last["stuck"]; ok {
		t.Error("an unknown caller has a last send")
	}
}

// TestStopTimeQuiet: a caller that sends to the target rarely (every
// 10 s before the fault) is judged with three times that gap: a send
// 8 s before the end is still sending, not stopped.
func TestStopTimeQuiet(t *testing.T) {
	target := Target{ID: "i-1", Addr: "127.11.0.1:80"}
	fault, end := at(25), at(60)
	r := Record{Caller: "rare", Kind: DNSDirect, Requests: sends(target.Addr, Success, 0, 20, 10, 52)}
	r.Requests = append(r.Requests, sends("127.11.0.2:80", Success, 59)...)
	c := StopTime([]Record{r}, target, fault, end, 2*time.Second)
	if c.Converged || c.Quiet["rare"] != 30*time.Second || fmt.Sprint(c.StillSending) != "[rare]" {
		t.Errorf("%+v, want still sending under a 30s quiet", c)
	}
}

// StopGiven judges a caller by what it was given: stopped at the view
// that last took the target out (or its last send to it, if later),
// never while its last view holds the target, unknown without views.
func TestStopGiven(t *testing.T) {
	target := Target{ID: "i-1", Addr: "127.11.0.1:80"}
	other := "127.11.0.2:80"
	both := []string{target.Addr, other}
	fault, end := at(10), at(40)
	view := func(s float64, addrs ...string) View { return View{At: at(s), Addrs: addrs} }
	recs := []Record{
		// Given at the fault, taken out at 14 s.
		{Caller: "out", Views: []View{view(1, both...), view(14, other)}, Requests: sends(target.Addr, Failure, 11, 13.5)},
		// Taken out at 12 s, given again at 15 s, out for good at 18 s.
		{Caller: "back", Views: []View{view(1, both...), view(12, other), view(15, both...), view(18, other)}},
		// Not given from the fault on: 0.
		{Caller: "never", Views: []View{view(1, other)}, Requests: sends(target.Addr, Success, 5)},
		// First view after the fault, given, then out at 20 s.
		{Caller: "late", Views: []View{view(11, both...), view(20, other)}},
		// Out at 12 s, but a request sent at 12.5 s (in flight) counts.
		{Caller: "inflight", Views: []View{view(1, both...), view(12, other)}, Requests: sends(target.Addr, Timeout, 12.5)},
	}
	c := StopGiven(recs, target, fault, end)
	want := map[string]time.Duration{"out": 4 * time.Second, "back": 8 * time.Second, "never": 0, "late": 10 * time.Second, "inflight": 2500 * time.Millisecond}
	for name, w := range want {
		if got := c.Last[name]; got != w {
			t.Errorf("%s stopped %v after the fault, want %v", name, got, w)
		}
	}
	if !c.Converged || c.P99 != 10*time.Second || c.Callers != 5 {
		t.Errorf("%+v, want converged at 10s over 5", c)
	}
	// Still given at the end, and no views: never stopped.
	recs = append(recs, Record{Caller: "held", Views: []View{view(1, both...)}}, Record{Caller: "blind"})
	c = StopGiven(recs, target, fault, end)
	if c.Converged || fmt.Sprint(c.StillSending) != "[held]" || fmt.Sprint(c.Unknown) != "[blind]" {
		t.Errorf("%+v, want not converged, held still sending, blind unknown", c)
	}
	// A view after the end does not count.
	c = StopGiven([]Record{{Caller: "after", Views: []View{view(1, both...), view(41, other)}}}, target, fault, end)
	if c.Converged {
		t.Errorf("%+v: a view past the end stopped the caller", c)
	}
	if n := SentTo(recs[0], target, at(10), at(13.5)); n != 1 {
		t.Errorf("SentTo [10, 13.5): %d, want 1", n)
	}
}

// TestBucketsByTheWallClock: a send just before end, stamped without a
// monotonic reading (as a record's Origin is), falls in the last
// interval, never past it, with start and end stamped with one.
func TestBucketsByTheWallClock(t *testing.T) {
	start := time.Now()
	end := start.Add(321*time.Second - time.Microsecond)
	n := bucketCount(start, end, time.Second)
	for _, at := range []time.Time{end.Round(0).Add(-time.Nanosecond), end.Add(-time.Nanosecond), start.Round(0), start} {
		if i := bucketOf(at, start, end, time.Second); i < 0 || i >= n {
			t.Errorf("bucketOf(%v) = %d, want within [0, %d)", at.Sub(start), i, n)
		}
	}
	if i := bucketOf(end.Round(0), start, end, time.Second); i != -1 {
		t.Errorf("bucketOf(end) = %d, want -1", i)
	}
}
