package agent

import "time"

// How current the agent's views are: now while a fresh server's stream
// is open and has answered; else when they last were, which a stale
// server's word (agentview.StaleAgeKey) may put further back than the
// moment its stream ended.

// LastSync returns when the agent last knew its views to be the
// servers' current ones: now while a fresh server's stream is open and
// has answered, else when it closed (or the file's time, after a start
// from disk) — or earlier, as a stale server said (syncedLocked). It
// is dnsserver.Config.LastSync.
func (a *Agent) LastSync() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.syncedLocked(a.cfg.Now())
}

// syncedLocked returns when the agent last knew its views current: now
// while a fresh server's stream is open, when a stale server's view was
// current while its stream is open, else lastGood.
func (a *Agent) syncedLocked(now time.Time) time.Time {
	switch {
	case a.connected && a.staleFrom.IsZero():
		return now
	case a.connected:
		return a.staleFrom
	}
	return a.lastGood
}

// serverStale records a stale server's word that its view was current
// age before now.
func (a *Agent) serverStale(age time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	from := a.cfg.Now().Add(-age)
	if a.staleFrom.IsZero() || from.Before(a.staleFrom) {
		a.staleFrom = from
	}
}

// disconnected marks the views no longer refreshed, and wakes the
// writer to record when they last were: now, or when a stale server
// said its view was current.
func (a *Agent) disconnected() {
	a.mu.Lock()
	defer a.mu.Unlock()
	from := a.staleFrom
	a.staleFrom = time.Time{}
	if a.connected {
		a.connected, a.lastGood, a.heard = false, a.cfg.Now(), !from.IsZero()
		if a.heard {
			a.lastGood = from
		}
		a.m.connected.Set(0)
		select {
		case a.dirty <- struct{}{}:
		default:
		}
	}
}

// refreshedLocked returns when v was last known current.
func (a *Agent) refreshedLocked(v *view, now time.Time) time.Time {
	switch {
	case a.connected:
		return a.syncedLocked(now)
	case v.received.After(a.lastGood) && !a.heard:
		return v.received
	}
	return a.lastGood
}
