package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// Where an assignment puts the evacuated zone (xdstest.ZonePlacement).
const (
	zoneNone      = xdstest.ZoneAbsent    // no endpoint of the zone in it
	zoneIn        = xdstest.ZoneInTier    // its endpoints where their tier puts them
	zoneEvacuated = xdstest.ZoneEvacuated // every one at the last priority, flagged cairn.evacuated
)

// layoutRegion is the region of every endpoint and subscriber when the
// layout has zones.
const layoutRegion = "eu"

// zoneName is endpoint ep's zone: eu-1a, eu-1b, … by ep mod -zones;
// none without zones.
func zoneName(o options, ep int) string {
	if o.zones == 0 {
		return ""
	}
	return fmt.Sprintf("%s-1%c", layoutRegion, 'a'+ep%o.zones)
}

func regionOf(o options, ep int) string {
	if o.zones == 0 {
		return ""
	}
	return layoutRegion
}

// checkEvacuation fills the evacuation's defaults and checks its flags.
func (o *options) checkEvacuation() error {
	if o.evacuateAt > 0 && o.zones == 0 {
		o.zones = 3
	}
	switch {
	case o.zones < 0 || o.zones > 26:
		return errors.New("-zones must be 0–26")
	case o.evacuateAt < 0 || o.undoAt < 0:
		return errors.New("-evacuate-at and -undo-at must not be negative")
	case o.evacuateAt == 0 && o.undoAt > 0:
		return errors.New("-undo-at needs -evacuate-at")
	case o.evacuateAt == 0:
		return nil
	case o.target != "cairn":
		return errors.New("-evacuate-at needs -target cairn")
	case o.zones < 2:
		return errors.New("-evacuate-at needs at least 2 -zones, so that the rest can take the traffic")
	case o.evacuateAt >= o.duration:
		return fmt.Errorf("-evacuate-at %s must fall within the changes (-duration %s)", o.evacuateAt, o.duration)
	case o.undoAt > 0 && (o.undoAt <= o.evacuateAt || o.undoAt >= o.duration):
		return fmt.Errorf("-undo-at %s must fall after -evacuate-at and within the changes (-duration %s)", o.undoAt, o.duration)
	}
	for ep := range min(o.endpoints, o.zones) {
		if zoneName(*o, ep) == o.evacZone {
			return nil
		}
	}
	return fmt.Errorf("-evacuate-zone %q: not a zone of the layout (%s to %s)", o.evacZone, zoneName(*o, 0), zoneName(*o, min(o.endpoints, o.zones)-1))
}

// zoneMove is a change of where a subscriber's view of one service (by
// watch index) puts the evacuated zone.
type zoneMove struct {
	at       time.Duration
	wi       int32
	from, to xdstest.Placement
}

// track records where the assignment of watched service wi, received
// at `at`, puts the evacuated zone.
func (s *subscriber) track(w *world, wi int, zone xdstest.Placement, at time.Duration) {
	if w.o.evacuateAt == 0 || s.zone[wi] == zone {
		return
	}
	if w.tracking.Load() {
		s.zoneMoves = append(s.zoneMoves, zoneMove{at: at, wi: int32(wi), from: s.zone[wi], to: zone})
	}
	s.zone[wi] = zone
}

// evacCall is one call to evacuate or undo, in the run's time.
type evacCall struct {
	made          bool
	start, commit time.Duration
	err           error
}

// evacuations makes the evacuation -evacuate-at after `from` (the
// changes' start, in the run's time), and the undo -undo-at after it,
// unless ctx ends first; it stops the changes when a call fails.
func (w *world) evacuations(ctx context.Context, tgt *target, from time.Duration, abort context.CancelFunc) {
	call := func(at time.Duration, undo bool) evacCall {
		t := time.NewTimer(from + at - w.now())
		defer t.Stop()
		select {
		case <-ctx.Done():
			return evacCall{}
		case <-t.C:
		}
		w.tracking.Store(true)
		c := evacCall{made: true, start: w.now()}
		c.err = tgt.evacuate(ctx, undo)
		c.commit = w.now()
		if c.err != nil {
			abort()
		}
		return c
	}
	if w.evac = call(w.o.evacuateAt, false); w.evac.err == nil && w.evac.made && w.o.undoAt > 0 {
		w.undo = call(w.o.undoAt, true)
	}
}

// shiftStats are how one shift (the evacuation, or its undo) reached
// the subscribers, and the withdrawals committed while it travelled.
type shiftStats struct {
	AtSeconds float64 `json:"at_s"` // the call, from the changes' start
	APIms     float64 `json:"api_ms"`
	Error     string  `json:"error,omitempty"`
	// Pairs are the (subscriber, watched service) whose view held
	// endpoints of the zone at the commit, where they were before the
	// shift; NoZone those whose view held none (nothing to shift) or
	// already shifted before the call.
	Pairs     int `json:"pairs"`
	NoZone    int `json:"pairs_without_the_zone"`
	Delivered int `json:"delivered"`
	// Regressed are pairs whose view showed the shift and then, before
	// the next call, the zone where it was before: a view going back,
	// which a stream never does (it sends from no older table).
	Regressed int `json:"regressed"`
	// LostZone are pairs whose view lost its last endpoint of the zone
	// (withdrawn) before it showed the shift: not timed, and not missing.
	LostZone    int     `json:"lost_the_zone_first"`
	BeforeReply int     `json:"before_api_reply"` // counted as 0
	Missing     int     `json:"never_arrived"`
	P50ms       float64 `json:"pair_p50_ms"`
	P99ms       float64 `json:"pair_p99_ms"`
	MaxMs       float64 `json:"pair_max_ms"`
	// Subscribers are those with at least one pair not lost; Reached
	// those that saw the shift in every one of those; T99ms when 99%
	// had (-1: never).
	Subscribers int     `json:"subscribers"`
	Reached     int     `json:"reached"`
	T99ms       float64 `json:"t99_subscribers_ms"`
	// Window is from the call to the last pair's delivery, in seconds
	// from the changes' start; Withdrawals those committed inside it.
	WindowFrom  float64   `json:"window_from_s"`
	WindowTo    float64   `json:"window_to_s"`
	Withdrawals kindStats `json:"withdrawals"`

	from, to time.Duration // the window, in the run's time
}

// evacReport is what -evacuate-at measured.
type evacReport struct {
	Zone  string      `json:"zone"`
	Zones int         `json:"zones"`
	Evac  shiftStats  `json:"evacuation"`
	Undo  *shiftStats `json:"undo,omitempty"`
	// Outside are the withdrawals committed outside every window;
	// OutsideWorstSecond the highest p99 of those committed in any one
	// second of the changes outside them (the windows last about as
	// long: a p99 over a second is noisier than over the whole run).
	Outside            kindStats `json:"withdrawals_outside"`
	OutsideWorstSecond float64   `json:"withdrawals_outside_worst_second_p99_ms"`
	OutsideWorstAt     float64   `json:"withdrawals_outside_worst_second_at_s"`
}

// evacSummary measures the evacuation and its undo from the
// subscribers' views, and the withdrawals inside and outside the
// windows the shifts travelled in.
func evacSummary(o options, w *world, subs []*subscriber, watchers [][]int, changesStart, changesEnd time.Duration) *evacReport {
	if o.evacuateAt == 0 {
		return nil
	}
	er := &evacReport{Zone: o.evacZone, Zones: o.zones}
	until := changesEnd + time.Hour // after the run
	if w.undo.made {
		until = w.undo.start
	}
	er.Evac = shiftOf(w.evac, subs, changesStart, until, zoneIn, zoneEvacuated)
	windows := [][2]time.Duration{{er.Evac.from, er.Evac.to}}
	if o.undoAt > 0 {
		u := shiftOf(w.undo, subs, changesStart, changesEnd+time.Hour, zoneEvacuated, zoneIn)
		er.Undo = &u
		windows = append(windows, [2]time.Duration{u.from, u.to})
	}
	in := func(c change, win [2]time.Duration) bool { return c.commit >= win[0] && c.commit <= win[1] }
	er.Evac.Withdrawals = summarize(o, w, subs, watchers, func(c change) bool { return in(c, windows[0]) }).Withdrawals
	if er.Undo != nil {
		er.Undo.Withdrawals = summarize(o, w, subs, watchers, func(c change) bool { return in(c, windows[1]) }).Withdrawals
	}
	outside := func(c change) bool {
		return !slices.ContainsFunc(windows, func(win [2]time.Duration) bool { return in(c, win) })
	}
	er.Outside = summarize(o, w, subs, watchers, outside).Withdrawals
	for sec := time.Duration(0); sec < changesEnd-changesStart; sec += time.Second {
		from := changesStart + sec
		k := summarize(o, w, subs, watchers, func(c change) bool {
			return c.commit >= from && c.commit < from+time.Second && outside(c)
		}).Withdrawals
		if k.Delivered > 0 && k.P99ms > er.OutsideWorstSecond {
			er.OutsideWorstSecond, er.OutsideWorstAt = k.P99ms, sec.Seconds()
		}
	}
	return er
}

// shiftOf measures one call's shift: each pair whose view was `before`
// at the commit is delivered at the first move to `after` since. until
// is when the next call starts.
func shiftOf(c evacCall, subs []*subscriber, changesStart, until time.Duration, before, after xdstest.Placement) shiftStats {
	st := shiftStats{AtSeconds: (c.start - changesStart).Seconds(), APIms: ms(c.commit - c.start), T99ms: -1}
	if c.err != nil {
		st.Error = c.err.Error()
	}
	if !c.made || c.err != nil {
		return st
	}
	var lat, reached []time.Duration
	last := c.commit
	for _, s := range subs {
		// Each watched service's moves, in order; where the view was at
		// the commit: the last move's to by then, else the first's from,
		// else where it is now.
		moves := make([][]zoneMove, len(s.watch))
		for _, m := range s.zoneMoves {
			moves[m.wi] = append(moves[m.wi], m)
		}
		pairs, ok := 0, true
		var latest time.Duration
		for wi := range s.watch {
			mv := moves[wi]
			at := s.zone[wi]
			if len(mv) > 0 {
				at = mv[0].from
			}
			i := 0
			for ; i < len(mv) && mv[i].at <= c.commit; i++ {
				at = mv[i].to
			}
			if at == after && i > 0 && mv[i-1].at >= c.start {
				// Seen between the call and its reply.
				st.Pairs++
				st.Delivered++
				st.BeforeReply++
				pairs++
				lat = append(lat, 0)
				continue
			}
			if at != before {
				st.NoZone++
				continue
			}
			st.Pairs++
			j := slices.IndexFunc(mv[i:], func(m zoneMove) bool { return m.to == after || m.to == zoneNone })
			switch {
			case j < 0:
				st.Missing++
				pairs++
				ok = false
				continue
			case mv[i+j].to == zoneNone:
				// Its last endpoints in the zone withdrawn first: what
				// it sees next of the zone is an admission's time.
				st.LostZone++
				continue
			}
			st.Delivered++
			pairs++
			d := mv[i+j].at
			if slices.ContainsFunc(mv[i+j+1:], func(m zoneMove) bool { return m.at < until && m.to == before }) {
				st.Regressed++
			}
			lat = append(lat, d-c.commit)
			latest = max(latest, d-c.commit)
			last = max(last, d)
		}
		if pairs > 0 {
			st.Subscribers++
			if ok {
				st.Reached++
				reached = append(reached, latest)
			}
		}
	}
	slices.Sort(lat)
	slices.Sort(reached)
	st.P50ms, st.P99ms, st.MaxMs = ms(pct(lat, 50)), ms(pct(lat, 99)), ms(pct(lat, 100))
	if need := (99*st.Subscribers + 99) / 100; need > 0 && len(reached) >= need {
		st.T99ms = ms(reached[need-1])
	}
	st.from, st.to = c.start, last
	st.WindowFrom, st.WindowTo = (c.start - changesStart).Seconds(), (last - changesStart).Seconds()
	return st
}

func (e *evacReport) print() {
	fmt.Println()
	fmt.Println("| shift of zone " + e.Zone + " | at (API call) | reached 99% of subscribers | subscribers reached | pairs p50 / p99 / max | pairs shifted / lost the zone first / without it / missing / went back | window | withdrawals committed in it | withdrawal p50 / p99 / max in it | outside the windows: p50 / p99 / max | outside: worst p99 of a second | withdrawals at 99% within 5 s, in it / outside |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	row := func(name string, s shiftStats) {
		if s.Error != "" {
			fmt.Printf("| %s | %.1f s | failed: %s |  |  |  |  |  |  |  |  |  |\n", name, s.AtSeconds, s.Error)
			return
		}
		t99 := "never"
		if s.T99ms >= 0 {
			t99 = "**" + msStr(s.T99ms) + "**"
		}
		w, out := s.Withdrawals, e.Outside
		fmt.Printf("| %s | %.1f s (%s) | %s | %d of %d | %s / %s / %s | %d / %d / %d / %d / %d | %.1f–%.1f s | %d (%d deliveries) | %s / **%s** / %s | %s / **%s** / %s | %s (at %.0f s) | %d of %d / %d of %d |\n",
			name, s.AtSeconds, msStr(s.APIms), t99, s.Reached, s.Subscribers, msStr(s.P50ms), msStr(s.P99ms), msStr(s.MaxMs),
			s.Delivered, s.LostZone, s.NoZone, s.Missing, s.Regressed, s.WindowFrom, s.WindowTo, w.Changes, w.Delivered,
			msStr(w.P50ms), msStr(w.P99ms), msStr(w.MaxMs), msStr(out.P50ms), msStr(out.P99ms), msStr(out.MaxMs),
			msStr(e.OutsideWorstSecond), e.OutsideWorstAt,
			w.T99Within5s, w.Changes, out.T99Within5s, out.Changes)
	}
	row(fmt.Sprintf("evacuate (%d zones)", e.Zones), e.Evac)
	if e.Undo != nil {
		row("undo", *e.Undo)
	}
}
