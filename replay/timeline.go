package replay

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/history"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// Timeline is the service's eligible endpoints per zone over [from, to]
// as this node served them, with the withdrawals, admissions and
// evacuations that moved them: the dashboard's chart. A from before the
// history starts is moved to its start.
func (r *Replayer) Timeline(ns, svc string, from, to time.Time) (*wire.ServiceHistory, error) {
	h := r.cfg.History
	p, err := h.At(ns, svc, from)
	var old *history.TooOldError
	if errors.As(err, &old) {
		from = old.Since
		p, err = h.At(ns, svc, from)
	}
	if err != nil {
		return nil, err
	}
	out := &wire.ServiceHistory{Namespace: ns, Service: svc, From: from, To: to, HistorySince: p.Since,
		Zones: []wire.ZoneSeries{}, Marks: []wire.HistoryMark{}}
	type place struct{ region, zone string }
	counts := map[place]int{}
	index := map[place]int{} // into out.Zones
	series := func(pl place) *wire.ZoneSeries {
		i, ok := index[pl]
		if !ok {
			i = len(out.Zones)
			index[pl] = i
			out.Zones = append(out.Zones, wire.ZoneSeries{Region: pl.region, Zone: pl.zone,
				Points: []wire.CountPoint{{At: from, Eligible: 0}}})
		}
		return &out.Zones[i]
	}
	for _, m := range p.Members {
		pl := place{m.Region, m.Zone}
		s := series(pl)
		if m.Entry.Flags.Has(status.Eligible) {
			counts[pl]++
			s.Points[0].Eligible = counts[pl]
		}
	}
	changes, err := h.Changes(ns, svc, from, to)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		was, is := c.Before.Entry.Flags.Has(status.Eligible), c.After.Entry.Flags.Has(status.Eligible)
		if was == is {
			continue
		}
		m, kind, d := c.After, "admission", 1
		if was {
			m, kind, d = c.Before, "withdrawal", -1
		}
		pl := place{m.Region, m.Zone}
		counts[pl] += d
		s := series(pl)
		if last := &s.Points[len(s.Points)-1]; last.At.Equal(c.At) {
			last.Eligible = counts[pl]
		} else {
			s.Points = append(s.Points, wire.CountPoint{At: c.At, Eligible: counts[pl]})
		}
		id := ""
		if m.Instance != nil {
			id = m.Instance.ID
		}
		out.Marks = append(out.Marks, wire.HistoryMark{At: c.At, Kind: kind, Instance: id, Region: m.Region, Zone: m.Zone})
	}
	if r.cfg.Events != nil {
		for _, ev := range r.cfg.Events(ns, svc) {
			if ev.Kind.Evacuation() && ev.At.After(from) && !ev.At.After(to) {
				out.Marks = append(out.Marks, wire.HistoryMark{At: ev.At, Kind: string(ev.Kind), Detail: ev.Reason})
			}
		}
	}
	slices.SortStableFunc(out.Marks, func(a, b wire.HistoryMark) int { return a.At.Compare(b.At) })
	slices.SortFunc(out.Zones, func(a, b wire.ZoneSeries) int {
		return cmp.Or(cmp.Compare(a.Region, b.Region), cmp.Compare(a.Zone, b.Zone))
	})
	return out, nil
}
