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
