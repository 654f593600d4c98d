package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/internal/agentview"
	"github.com/cairn-sd/cairn/internal/dnsname"
	"github.com/cairn-sd/cairn/status/tablefile"
)

// keep writes the agent's table and views to cfg.Path after each change,
// at most once per SaveInterval, off the serving path, until ctx is
// done; then once more. Views that do not change are written again when
// the stream that kept them current ends, and every TouchInterval while
// it is open, so that the file says how old they are. A failed write is
// logged and counted: the agent serves from memory, the file is only for
// its next start.
func (a *Agent) keep(ctx context.Context) {
	if a.cfg.Path == "" {
		return
	}
	var k kept
	touch := time.NewTicker(a.cfg.TouchInterval)
	defer touch.Stop()
	for {
		select {
		case <-ctx.Done():
			a.save(&k, true)
			return
		case <-a.dirty:
		case <-touch.C:
		}
		a.save(&k, false)
		select {
		case <-ctx.Done():
			a.save(&k, true)
			return
		case <-time.After(a.cfg.SaveInterval):
		}
	}
}

// kept is what the file holds: the version of the table written, and
// when its views were last known current then.
type kept struct {
	version uint64
	synced  time.Time
}

// save writes the current table with its views if it is newer than the
// one the file holds, or if the file's time of last refresh is behind:
// the stream has ended since, TouchInterval has passed, or the agent is
// stopping (final).
func (a *Agent) save(k *kept, final bool) {
	a.mu.Lock()
	t := a.cfg.Table.Acquire()
	if t == nil {
		a.mu.Unlock()
		return
	}
	now := a.cfg.Now()
	synced := a.syncedLocked(now)
	// While connected, the ticker paces the writes of a later time; half
	// its period keeps a write just after another from repeating it.
	behind := synced.After(k.synced) && (final || !a.connected || synced.Sub(k.synced) >= a.cfg.TouchInterval/2)
	if t.Version() == k.version && !behind {
		a.mu.Unlock()
		t.Release()
		return
	}
	// The table is the views' (publishLocked builds it under the lock),
	// so the two are taken together.
	views := make([]tablefile.View, 0, len(a.views))
	for _, name := range slices.Sorted(maps.Keys(a.views)) {
		v := a.views[name]
		views = append(views, tablefile.View{Name: name, Revision: v.got.Revision, Version: v.version,
			Received: v.received, Refreshed: a.refreshedLocked(v, now)})
	}
	keepPrev := a.wrote || a.fileGood
	a.mu.Unlock()

	s := tablefile.Take(t, synced, now)
	v := t.Version()
	t.Release()
	s.Views = views
	start := time.Now()
	err := tablefile.Replace(a.cfg.Path, s, keepPrev)
	a.m.saveSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		a.m.saveErrors.Inc()
		a.cfg.Logger.Error("writing the agent's views to disk", "path", a.cfg.Path, "err", err)
		return
	}
	k.version, k.synced = v, synced
	a.mu.Lock()
	a.wrote = true
	a.mu.Unlock()
}

// viewsOf rebuilds the views an agent kept in s: each view's service
// and its members' entries and instances, as the agent served them.
func viewsOf(s *tablefile.Snapshot) ([]*view, error) {
	byName := map[string]*view{}
	ids := map[uint32]*view{}
	for _, vs := range s.Views {
		ns, svc, ok := agentview.ParseName(vs.Name)
		if !ok {
			return nil, fmt.Errorf("agent: kept view %q is not <svc>.<ns>", vs.Name)
		}
		id := slices.Index(s.Services, ns+"/"+svc)
		if id < 0 || id+1 >= len(s.ServiceInfos) {
			return nil, fmt.Errorf("agent: kept view %q has no service in the table", vs.Name)
		}
		v := &view{name: vs.Name, received: vs.Received, refreshed: vs.Refreshed,
			got: &agentview.View{Revision: vs.Revision, Service: s.ServiceInfos[id+1]}}
		// v.version stays empty: a restored view is offered to no
		// server as held (see Agent.subscription).
		byName[vs.Name], ids[uint32(id+1)] = v, v
	}
	loc := func(id uint16) string {
		if id == 0 || int(id) > len(s.Localities) {
			return ""
		}
		return s.Localities[id-1]
	}
	for _, se := range s.Entries {
		v := ids[se.Entry.Service]
		if v == nil || se.Instance == nil {
			continue
		}
		if err := dnsname.CheckLabel(se.Instance.ID); err != nil {
			return nil, fmt.Errorf("agent: kept instance %q of %s: %w", se.Instance.ID, v.name, err)
		}
		e := se.Entry
		v.got.Instances = append(v.got.Instances, agentview.Instance{InstanceInfo: *se.Instance,
			Region: loc(e.Region), Zone: loc(e.Zone), Verdict: e.Verdict, Lifecycle: e.Lifecycle, Flags: e.Flags,
			Weight: e.Weight, BaseWeight: e.BaseWeight, Shift: e.Shift})
	}
	out := make([]*view, 0, len(byName))
	for _, v := range byName {
		slices.SortFunc(v.got.Instances, func(a, b agentview.Instance) int { return strings.Compare(a.ID, b.ID) })
		v.served = v.got.Instances
		out = append(out, v)
	}
	return out, nil
}

// splitService splits "ns/svc".
func splitService(s string) (ns, svc string, ok bool) {
	ns, svc, ok = strings.Cut(s, "/")
	return ns, svc, ok && dnsname.CheckLabel(ns) == nil && dnsname.CheckLabel(svc) == nil
}
