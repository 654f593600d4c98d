package history

import (
	"fmt"
	"strconv"
	"time"
)

// Freshness is how current the node's view was, by the DNS server's
// serve-stale rule (SPEC §3): what its answers said of it.
type Freshness uint8

// The freshness states.
const (
	// Fresh: answers as they are.
	Fresh Freshness = iota
	// Stale: the view older than --stale-after; answers carry EDE 3
	// (19 for NXDOMAIN) and TTLs of at most 30 s.
	Stale
	// Restored: the node served the table kept on disk before its
	// replica caught up: stale, whatever its age.
	Restored
	// Expired: the view older than --max-stale; answers are SERVFAIL
	// with EDE 22.
	Expired
)

var freshnessNames = [...]string{"fresh", "stale", "restored", "expired"}

func (f Freshness) String() string {
	if int(f) < len(freshnessNames) {
		return freshnessNames[f]
	}
	return "freshness(" + strconv.Itoa(int(f)) + ")"
}

// MarshalText writes f's name.
func (f Freshness) MarshalText() ([]byte, error) {
	if int(f) >= len(freshnessNames) {
		return nil, fmt.Errorf("history: %s has no name", f)
	}
	return []byte(freshnessNames[f]), nil
}

// maxFresh bounds the freshness timeline: a node flapping between fresh
// and stale every second for a day keeps its last 10,000 changes.
const maxFresh = 10_000

// freshStep is a change of the node's freshness, at at; synced is when
// its view was last known current then.
type freshStep struct {
	at     time.Time
	f      Freshness
	synced time.Time
}

// freshness is the node's freshness at now, by the DNS server's rule,
// and when its view was last known current.
func (h *History) freshness(now time.Time) (Freshness, time.Time) {
	if h.cfg.Synced == nil {
		return Fresh, now
	}
	last := h.cfg.Synced()
	if last.IsZero() {
		last = h.started // never synced since it started: stale since then
	}
	age := now.Sub(last)
	switch {
	case age > h.cfg.MaxStale:
		return Expired, last
	case h.cfg.Restored != nil && h.cfg.Restored():
		return Restored, last
	case age > h.cfg.StaleAfter:
		return Stale, last
	}
	return Fresh, last
}

// noteFreshness appends the node's freshness at now to the timeline if
// it changed. Called with h.mu held.
func (h *History) noteFreshness(now time.Time) {
	f, synced := h.freshness(now)
	if n := len(h.fresh); n > 0 && h.fresh[n-1].f == f && (f == Fresh || h.fresh[n-1].synced.Equal(synced)) {
		return
	}
	fs := freshStep{at: now, f: f, synced: synced}
	h.fresh = append(h.fresh, fs)
	h.emit(freshRecord(fs))
}

// freshnessAt returns the node's freshness at t, and when its view was
// last known current then (zero when fresh): Fresh before the timeline
// starts. Called with h.mu held.
func (h *History) freshnessAt(t time.Time) (Freshness, time.Time) {
	for i := len(h.fresh) - 1; i >= 0; i-- {
		if fs := h.fresh[i]; !fs.at.After(t) {
			if fs.f == Fresh {
				return Fresh, time.Time{}
			}
			return fs.f, fs.synced
		}
	}
	return Fresh, time.Time{}
}
