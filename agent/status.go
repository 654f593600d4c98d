package agent

import (
	"maps"
	"slices"
	"time"
)

// ViewStatus is one view as GET /v1/agent/status reports it.
type ViewStatus struct {
	Name      string    `json:"name"` // "<svc>.<ns>"
	Revision  uint64    `json:"revision"`
	Received  time.Time `json:"received"`
	Refreshed time.Time `json:"refreshed"`
	// AgeSeconds is the time since the view was last known current;
	// Stale says it is older than the DNS server's stale threshold, or
	// restored from disk and not refreshed since.
	AgeSeconds float64 `json:"age_seconds"`
	Stale      bool    `json:"stale"`
	Instances  int     `json:"instances"`
	Eligible   int     `json:"eligible"`
	// Deferred counts withdrawals the client-side shrink cap holds back.
	Deferred int `json:"deferred"`
}

// Status is GET /v1/agent/status.
type Status struct {
	Server    string       `json:"server"`
	Connected bool         `json:"connected"`
	Restored  bool         `json:"restored"`
	Views     []ViewStatus `json:"views"`
	// Absent are names a server said do not exist.
	Absent []string `json:"absent"`
	// LoadError is what was wrong with the views file at start, if
	// anything (the agent started from the previous copy, or from
	// nothing).
	LoadError string `json:"load_error,omitempty"`
}

// Status reports each view; staleAfter is the DNS server's threshold.
func (a *Agent) Status(staleAfter time.Duration) Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Now()
	st := Status{Server: a.server, Connected: a.connected, Restored: a.restored, Views: []ViewStatus{}, Absent: []string{}}
	for _, name := range slices.Sorted(maps.Keys(a.views)) {
		v := a.views[name]
		refreshed := a.refreshedLocked(v, now)
		age := now.Sub(refreshed)
		st.Views = append(st.Views, ViewStatus{Name: name, Revision: v.got.Revision, Received: v.received, Refreshed: refreshed,
			AgeSeconds: age.Seconds(), Stale: a.restored || age > staleAfter, Instances: len(v.got.Instances),
			Eligible: eligible(v.served), Deferred: v.deferred})
	}
	if len(a.absent) > 0 {
		st.Absent = slices.Sorted(maps.Keys(a.absent)) // nil for none, which JSON would show as null
	}
	if a.loadErr != nil {
		st.LoadError = a.loadErr.Error()
	}
	return st
}
