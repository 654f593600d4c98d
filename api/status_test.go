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
// as the xDS server sums them (issue 14 item 7); with no xDS server it
// has no xds at all.
func TestStatusLastContactAndXDS(t *testing.T) {
	sum := wire.XDSSummary{Streams: 3, XDSSubscribers: wire.XDSSubscribers{Subscribers: 2, Behind: 1,
		Revisions: []wire.XDSRevision{{Revision: 12, Subscribers: 1}, {Revision: 0, Subscribers: 1, Behind: 1}}}}
	e := newEnv(t, options{xdsSummary: func() wire.XDSSummary { return sum }})
	before := time.Now()
	r := e.call(t, http.MethodGet, "/v1/status", "", "")
	wantStatus(t, r, http.StatusOK)
	st := decodeAs[wire.Status](t, r)
	if st.LastContact.Before(before.Add(-time.Second)) || st.LastContact.After(time.Now().Add(time.Second)) {
		t.Errorf("leader's last contact %v, want the time of the answer (%v)", st.LastContact, before)
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
}
