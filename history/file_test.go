package history

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
)

// states lists what a history answers for a service at each of times:
// the eligible members, weights and zones, and the changes.
func states(t *testing.T, h *History, times []time.Time) string {
	t.Helper()
	out := ""
	for _, at := range times {
		p, err := h.At("shop", "pay", at)
		if err != nil {
			out += fmt.Sprintf("%s: %v\n", at, err)
			continue
		}
		out += fmt.Sprintf("%s: v%d r%d %s since %s:", at, p.Version, p.Revision, p.Freshness, p.Since)
		for _, m := range p.Members {
			out += fmt.Sprintf(" %s/%s/%s/%d/%s/%v", m.Instance.ID, m.Region, m.Zone, m.Entry.Weight, m.Entry.Verdict, m.Instance.Addrs)
		}
		out += "\n"
	}
	ch, err := h.Changes("shop", "pay", time.Time{}, times[len(times)-1])
	if err != nil {
		t.Fatal(err)
	}
	return out + fmt.Sprintf("%d changes\n", len(ch))
}

// reopen makes a history of the same file, as a restart does.
func reopen(t *testing.T, r *rig, path string) *History {
	t.Helper()
	h, err := New(Config{Table: r.tb.Publisher, Now: r.clock.Now, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A restart reads the history back: it answers for the time before as
// it did.
func TestRestartKeepsHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history")
	r := newRig(t, 16, Config{Path: path})
	a, b := statustest.Ready("a", "10.0.0.1").In("r1", "z1"), statustest.Ready("b", "2001:db8::2").In("r1", "z2")
	a.Ports = map[string]uint16{"http": 8080}
	var times []time.Time
	for i := range 20 {
		a.Weight = uint16(10 * (i%5 + 1))
		at := t0.Add(time.Duration(i) * time.Second)
		if i == 7 {
			b = statustest.Withdrawn("b", "2001:db8::2").In("r1", "z2")
		}
		r.publish(t, at, svc("shop", "pay", a, b))
		times = append(times, at)
		if i%6 == 0 {
			r.h.flush() // appends, as Run does each tick
		}
	}
	r.h.flush()
	want := states(t, r.h, times)
	h2 := reopen(t, r, path)
	if got := states(t, h2, times); got != want {
		t.Errorf("after a restart:\n%s\nwant\n%s", got, want)
	}

	// A rewrite (the file grown, or missing records) reads back the same,
	// bases included.
	r.h.mu.Lock()
	for range 5 {
		r.h.fold(r.h.logs["shop"], "test")
	}
	r.h.file.rewrite = true
	r.h.mu.Unlock()
	want = states(t, r.h, times)
	r.h.flush()
	if got := states(t, reopen(t, r, path), times); got != want {
		t.Errorf("after a rewrite:\n%s\nwant\n%s", got, want)
	}
	r.h.close()
}

// A torn tail is cut at the last record that checks, and the next
// write rewrites the file whole.
func TestTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history")
	r := newRig(t, 8, Config{Path: path})
	a := statustest.Ready("a", "10.0.0.1")
	for i := range 3 {
		a.Weight = uint16(i + 1)
		r.publish(t, t0.Add(time.Duration(i)*time.Second), svc("shop", "pay", a))
		r.h.flush()
	}
	r.h.close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)-3], 0o600); err != nil { // the last step torn
		t.Fatal(err)
	}
	h := reopen(t, r, path)
	p, err := h.At("shop", "pay", t0.Add(10*time.Second))
	if err != nil || p.Members[0].Entry.Weight != 2 {
		t.Fatalf("after the torn step: %+v %v, want the second step (weight 2)", p, err)
	}
	h.flush()
	h.close()
	if got := states(t, reopen(t, r, path), []time.Time{t0.Add(10 * time.Second)}); got != states(t, h, []time.Time{t0.Add(10 * time.Second)}) {
		t.Errorf("after the rewrite: %s", got)
	}
}

// A stalled disk drops what waits past maxPending, and the next write
// rewrites the file: it never misses a record between two it holds.
func TestDroppedRecordsRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history")
	r := newRig(t, 8, Config{Path: path})
	r.publish(t, t0, svc("shop", "pay", statustest.Ready("a", "10.0.0.1")))
	r.h.flush()
	r.h.mu.Lock()
	r.h.emit(make([]byte, maxPending+1)) // past the bound: dropped
	if !r.h.file.rewrite || len(r.h.pending) != 0 {
		t.Errorf("rewrite %v, %d bytes pending", r.h.file.rewrite, len(r.h.pending))
	}
	r.h.mu.Unlock()
	r.h.flush()
	r.h.close()
	if _, err := reopen(t, r, path).At("shop", "pay", t0); err != nil {
		t.Error(err)
	}
}

// FuzzLoad: whatever follows the header, loading neither panics nor
// keeps a step or a base that names a locality it does not hold.
func FuzzLoad(f *testing.F) {
	st := step{nanos: t0.UnixNano(), version: 1, revision: 1,
		data:  appendChange(nil, 3, status.Entry{}, status.Entry{Key: 9, Incarnation: 1, Flags: status.Eligible, Weight: 5, Zone: 1}, false, true),
		infos: []*status.InstanceInfo{{ID: "a", Incarnation: 1, Ports: map[string]uint16{"http": 80}}}}
	st.data = appendChange(st.data, 3, status.Entry{Key: 9}, status.Entry{Key: 9, Weight: 7}, false, false)
	st.data = appendChange(st.data, 4, status.Entry{}, status.Entry{}, true, false)
	e := enc{b: stepRecord("shop/pay", &st)}
	f.Add(frame(frame(nil, localityRecord("z1")), e.b))
	f.Add(frame(nil, freshRecord(freshStep{at: t0, f: Stale, synced: t0})))
	f.Fuzz(func(t *testing.T, body []byte) {
		path := filepath.Join(t.TempDir(), "history")
		if err := os.WriteFile(path, append([]byte(fileHeader), body...), 0o600); err != nil {
			t.Fatal(err)
		}
		pub, err := status.New(status.Config{Capacity: 4})
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(Config{Table: pub, Path: path, Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range h.services {
			live := s.log.live()
			for i := range live {
				if err := live[i].check(len(h.locNames), func(id uint32) bool { return h.byID(id) != nil }); err != nil {
					t.Fatalf("a step read from the file does not check: %v", err)
				}
			}
			for _, m := range s.base {
				if int(m.entry.Region) >= len(h.locNames) || int(m.entry.Zone) >= len(h.locNames) {
					t.Fatalf("a base member names locality %d/%d of %d", m.entry.Region, m.entry.Zone, len(h.locNames))
				}
			}
			if p, err := h.At(s.ns, s.key[len(s.ns)+1:], t0); err == nil {
				if _, err := p.Table(); err != nil {
					t.Fatalf("a point read from the file makes no table: %v", err)
				}
			}
		}
	})
}
