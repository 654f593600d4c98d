package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/history"
	"github.com/cairn-sd/cairn/wire"
)

// The view route reads one of at, revision and version, and the place,
// and hands them to Config.Replay; bad input is refused naming the
// field, and a service without history is 404.
func TestReplayView(t *testing.T) {
	now := time.Date(2026, 12, 6, 14, 2, 17, 0, time.UTC)
	var got wire.ReplayQuery
	e := newEnv(t, options{now: func() time.Time { return now }, replay: func(q wire.ReplayQuery) (*wire.Replay, error) {
		got = q
		switch q.Service {
		case "gone":
			return nil, history.ErrUnknown
		case "old":
			return nil, &history.TooOldError{Key: "shop/old", Since: now.Add(-time.Hour)}
		}
		return &wire.Replay{Namespace: q.Namespace, Service: q.Service, At: q.At}, nil
	}})
	for _, tc := range []struct {
		query string
		want  wire.ReplayQuery
	}{
		{"at=2026-12-06T14:00:00Z&zone=z1&region=r1", wire.ReplayQuery{At: now.Add(-137 * time.Second), Region: "r1", Zone: "z1"}},
		{"at=-90s&instance=pay-1", wire.ReplayQuery{At: now.Add(-90 * time.Second), Instance: "pay-1"}},
		{"revision=42", wire.ReplayQuery{Revision: 42}},
		{"version=42-0a1b2c", wire.ReplayQuery{Revision: 42, Digest: "0a1b2c"}},
	} {
		r := e.call(t, http.MethodGet, svcPath("shop", "pay")+"/view?"+tc.query, "", "")
		wantStatus(t, r, http.StatusOK)
		tc.want.Namespace, tc.want.Service = "shop", "pay"
		if got != tc.want {
			t.Errorf("?%s: asked %+v, want %+v", tc.query, got, tc.want)
		}
	}
	for _, tc := range []struct{ query, field string }{
		{"", "at"},
		{"at=-1m&revision=3", "at"},
		{"at=yesterday", "at"},
		{"revision=0", "revision"},
		{"revision=x", "revision"},
		{"version=42", "version"},
		{"version=x-abc", "version"},
		{"at=-1m&zone=Not_A_Label", "zone"},
	} {
		r := e.call(t, http.MethodGet, svcPath("shop", "pay")+"/view?"+tc.query, "", "")
		wantError(t, r, http.StatusBadRequest, wire.CodeInvalid, tc.field)
	}
	wantError(t, e.call(t, http.MethodGet, svcPath("shop", "gone")+"/view?at=-1m", "", ""), http.StatusNotFound, wire.CodeNotFound, "no history")
	wantError(t, e.call(t, http.MethodGet, svcPath("shop", "old")+"/view?at=-2h", "", ""), http.StatusNotFound, wire.CodeNotFound, "starts at")

	none := newEnv(t, options{})
	wantError(t, none.call(t, http.MethodGet, svcPath("shop", "pay")+"/view?at=-1m", "", ""), http.StatusNotFound, wire.CodeNotFound, "no history")
}

// The history route reads from and to (default: the last 24 hours) and
// hands them to Config.Timeline.
func TestTimelineRoute(t *testing.T) {
	now := time.Date(2026, 12, 6, 14, 2, 17, 0, time.UTC)
	var from, to time.Time
	e := newEnv(t, options{now: func() time.Time { return now }, timeline: func(ns, svc string, f, tt time.Time) (*wire.ServiceHistory, error) {
		if svc == "gone" {
			return nil, history.ErrUnknown
		}
		from, to = f, tt
		return &wire.ServiceHistory{Namespace: ns, Service: svc, From: f, To: tt}, nil
	}})
	wantStatus(t, e.call(t, http.MethodGet, svcPath("shop", "pay")+"/history", "", ""), http.StatusOK)
	if !from.Equal(now.Add(-24*time.Hour)) || !to.Equal(now) {
		t.Errorf("default span %s – %s, want the last 24 hours", from, to)
	}
	wantStatus(t, e.call(t, http.MethodGet, svcPath("shop", "pay")+"/history?from=-1h&to=2026-12-06T14:00:00Z", "", ""), http.StatusOK)
	if !from.Equal(now.Add(-time.Hour)) || !to.Equal(now.Add(-137*time.Second)) {
		t.Errorf("span %s – %s", from, to)
	}
	wantError(t, e.call(t, http.MethodGet, svcPath("shop", "pay")+"/history?from=soon", "", ""), http.StatusBadRequest, wire.CodeInvalid, "from")
	wantError(t, e.call(t, http.MethodGet, svcPath("shop", "pay")+"/history?from=-1m&to=-2m", "", ""), http.StatusBadRequest, wire.CodeInvalid, "to")
	wantError(t, e.call(t, http.MethodGet, svcPath("shop", "gone")+"/history", "", ""), http.StatusNotFound, wire.CodeNotFound, "no history")
}
