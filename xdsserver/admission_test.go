package xdsserver

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestAdmissionCap(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	most := 0
	a := newAdmission(c.now, 2000, func() int { return most })
	if a.perWindow() != 100 {
		t.Fatalf("per window %d, want 5%% of 2000", a.perWindow())
	}
	admitted := func(n int, held bool) int {
		k := 0
		for range n {
			if a.admit(held) {
				k++
			}
		}
		return k
	}
	if got := admitted(150, false); got != 100 {
		t.Errorf("first 10 s after a restart: admitted %d of 150 new clients, want 100", got)
	}
	c.t = c.t.Add(9 * time.Second)
	if got := admitted(10, true); got != 0 {
		t.Errorf("still in the first window: admitted %d, want 0", got)
	}
	c.t = c.t.Add(time.Second)
	if got := admitted(150, true); got != 100 {
		t.Errorf("second window: admitted %d of 150, want 100", got)
	}
	// 200 back of 2000: the cap holds until all 2000 are.
	for i := 2; i < 20; i++ {
		c.t = c.t.Add(admitWindow)
		admitted(100, false)
	}
	if got := admitted(500, false); got != 500 {
		t.Errorf("new clients once the expected subscribers are back: admitted %d of 500, want all", got)
	}
	// A failover: reconnecting clients are capped whatever the restart,
	// at 5% of the most streams open at once (3000 now).
	most = 3000
	c.t = c.t.Add(admitWindow)
	if got := admitted(500, true); got != 150 {
		t.Errorf("reconnections after the restart's are back: admitted %d of 500, want 150 (5%% of 3000)", got)
	}

	if a := newAdmission(c.now, 100, func() int { return 0 }); a.perWindow() != admitFloor {
		t.Errorf("per window for 100 expected: %d, want the floor %d", a.perWindow(), admitFloor)
	}
	a = newAdmission(c.now, 0, func() int { return 0 })
	if got := admitted(80, false); got != 80 {
		t.Errorf("a first start (nothing expected): admitted %d of 80 new clients, want all", got)
	}
	if got := admitted(80, true); got != admitFloor {
		t.Errorf("a first start: admitted %d of 80 reconnections in 10 s, want the floor %d", got, admitFloor)
	}
}

func TestSubscriberCountKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xds-subscribers.json")
	pub, err := status.New(status.Config{Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Unix(1_000_000, 0)}
	s, err := New(Config{Table: pub, SubscribersFile: path, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	// Nine streams at the peak, seven still open.
	for range 9 {
		s.opened()
	}
	s.open.Store(7)
	if n, err := s.persist(-1); err != nil || n != 9 {
		t.Fatalf("persist: %d, %v; want the peak, 9", n, err)
	}
	if n, err := loadSubscribers(path); err != nil || n != 9 {
		t.Fatalf("kept %d, %v; want 9", n, err)
	}
	if n, err := s.persist(9); err != nil || n != 7 {
		t.Fatalf("second persist: %d, %v; want the open count since, 7", n, err)
	}
	// The next start expects 7.
	s2, err := New(Config{Table: pub, SubscribersFile: path, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	if s2.adm.expected != 7 {
		t.Errorf("expected after a restart: %d, want 7", s2.adm.expected)
	}
	// A damaged file: started, without a cap.
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s3, err := New(Config{Table: pub, SubscribersFile: path, Now: c.now})
	if err != nil || s3.adm.expected != 0 {
		t.Errorf("with a damaged count: %v, expected %v; want a server without a cap", err, s3.adm)
	}
}
