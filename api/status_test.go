package api_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// TestStatusLastContactAndXDS: GET /v1/status tells, without a token,
// when this node last heard from a leader (on the leader, the time of
// the answer) and this node's xDS streams and subscribers by revision
// as the xDS server sums them (issue 14 item 7), and the address its xDS
// server listens on (grpc_addr, for cairn xds-bootstrap); with no xDS
// server it has neither.
func TestStatusLastContactAndXDS(t *testing.T) {
	sum := wire.XDSSummary{Streams: 3, XDSSubscribers: wire.XDSSubscribers{Subscribers: 2, Behind: 1,
		Revisions: []wire.XDSRevision{{Revision: 12, Subscribers: 1}, {Revision: 0, Subscribers: 1, Behind: 1}}}}
	e := newEnv(t, options{xdsSummary: func() wire.XDSSummary { return sum }, grpcAddr: "127.0.0.1:19481"})
	before := time.Now()
	r := e.call(t, http.MethodGet, "/v1/status", "", "")
	wantStatus(t, r, http.StatusOK)
	st := decodeAs[wire.Status](t, r)
	if st.LastContact.Before(before.Add(-time.Second)) || st.LastContact.After(time.Now().Add(time.Second)) {
		t.Errorf("leader's last contact %v, want the time of the answer (%v)", st.LastContact, before)
	}
	if st.GRPCAddr != "127.0.0.1:19481" {
		t.Errorf("grpc_addr %q, want the xDS server's 127.0.0.1:19481", st.GRPCAddr)
	}
	if st.XDS == nil || !reflect.DeepEqual(*st.XDS, sum) {
		t.Errorf("xds %+v, want %+v", st.XDS, sum)
	}
	// The documented shape: the subscribers' fields sit beside streams.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &raw); err != nil {
		t.Fatal(err)
	}
	var x map[string]any
	if err := json.Unmarshal(raw["xds"], &x); err != nil {
		t.Fatalf("xds %s: %v", raw["xds"], err)
	}
	if string(raw["grpc_addr"]) != `"127.0.0.1:19481"` {
		t.Errorf("status %s: grpc_addr %s", r.Body, raw["grpc_addr"])
	}
	for _, k := range []string{"streams", "subscribers", "behind", "revisions"} {
		if _, ok := x[k]; !ok {
			t.Errorf("xds %s lacks %q", raw["xds"], k)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, string(raw["last_contact"][1:len(raw["last_contact"])-1])); err != nil {
		t.Errorf("last_contact %s: %v", raw["last_contact"], err)
	}

	bare := newEnv(t, options{})
	r = bare.call(t, http.MethodGet, "/v1/status", "", "")
	wantStatus(t, r, http.StatusOK)
	raw = nil
	if err := json.Unmarshal(r.Body, &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["xds"]; ok {
		t.Errorf("status of a node with no xDS server %s has xds", r.Body)
	}
	if _, ok := raw["grpc_addr"]; ok {
		t.Errorf("status of a node with no xDS server %s has grpc_addr", r.Body)
	}
	if _, ok := raw["tls"]; ok {
		t.Errorf("status of a plaintext node %s has tls", r.Body)
	}
}

// TestFreshness: GET /v1/status and a service's view say how old the
// node's view is and whether that is stale, by the rule of its DNS
// answers: the time since the older of its last contact with a leader and
// its last status table, stale past StaleAfter (SPEC §1, §3).
func TestFreshness(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	e := newEnv(t, options{health: true, clock: clk, now: clk.Now})
	e.apply(t, "", webYAML)
	e.tick(t) // a table, built now by the test's clock
	check := func(wantStale bool, wantAge float64) {
		t.Helper()
		st := decodeAs[wire.Status](t, e.call(t, http.MethodGet, "/v1/status", "", ""))
		d := decodeAs[wire.ServiceDetail](t, e.call(t, http.MethodGet, svcPath("shop", "web"), "", ""))
		for what, f := range map[string]wire.Freshness{"status": st.Freshness, "view": d.View.Freshness} {
			if f.Stale != wantStale || f.AgeSeconds != wantAge {
				t.Errorf("%s: stale %v, age %v s; want stale %v, age %v s", what, f.Stale, f.AgeSeconds, wantStale, wantAge)
			}
		}
	}
	check(false, 0)
	clk.Advance(5 * time.Second) // StaleAfter's default, not past it
	check(false, 5)
	clk.Advance(time.Second)
	check(true, 6)
	e.tick(t) // a new table: fresh again
	check(false, 0)

	// The field names the page and the CLI read.
	r := e.call(t, http.MethodGet, "/v1/status", "", "")
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"stale", "age_seconds"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("status %s lacks %q", r.Body, k)
		}
	}
}

// TestStatusTableRevision: GET /v1/status names the store revision the
// served table was built from, which lags a write until the next build
// and then catches up (the dashboard reloads when it moves).
func TestStatusTableRevision(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	e := newEnv(t, options{health: true, clock: clk, now: clk.Now})
	status := func() wire.Status {
		r := e.call(t, http.MethodGet, "/v1/status", "", "")
		wantStatus(t, r, http.StatusOK)
		return decodeAs[wire.Status](t, r)
	}
	e.tick(t)
	built := status()
	if built.TableRevision == 0 || built.TableRevision != built.Revision {
		t.Fatalf("after a build: table_revision %d, revision %d; want them equal", built.TableRevision, built.Revision)
	}
	e.apply(t, "", slowYAML)
	written := status()
	if written.Revision <= built.Revision || written.TableRevision != built.TableRevision {
		t.Errorf("after a write, before a build: revision %d, table_revision %d; want the revision past %d, the table's still %d",
			written.Revision, written.TableRevision, built.Revision, built.TableRevision)
	}
	e.tick(t)
	if caught := status(); caught.TableRevision != caught.Revision {
		t.Errorf("after the next build: table_revision %d, revision %d; want them equal", caught.TableRevision, caught.Revision)
	}
}
