package api_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

const listBuilds = "cairn_api_service_list_builds_total"

// TestServiceListBuiltOncePerChange: however many dashboards fetch the
// services list at one store revision and one status table, it is
// counted and encoded once (issue 14 item 5); a write, or a new table,
// makes the next request build it again, and what it returns is new.
func TestServiceListBuiltOncePerChange(t *testing.T) {
	e := newEnv(t, options{health: true, clock: &clock{t: time.Unix(1_700_000_000, 0)}})
	e.apply(t, "", webYAML, cartYAML)
	e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	e.tick(t)

	fetch := func() []byte {
		r := e.call(t, http.MethodGet, "/v1/services", "", "")
		wantStatus(t, r, http.StatusOK)
		return r.Body
	}
	fetch()
	// A write, and then readers at once: they all ask for the revision
	// the write made, so one builds and the others wait for it.
	e.register(t, "", "shop", "cart", "c-1", "10.0.1.1")
	built := e.metric(t, listBuilds, nil)
	const readers = 32
	bodies := make([][]byte, readers)
	errs := make([]error, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Go(func() {
			resp, err := e.hc.Get(e.url + "/v1/services")
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			bodies[i], errs[i] = io.ReadAll(resp.Body)
		})
	}
	wg.Wait()
	for i, b := range bodies {
		if errs[i] != nil {
			t.Fatalf("reader %d: %v", i, errs[i])
		}
		if !bytes.Equal(b, bodies[0]) {
			t.Fatalf("reader %d got\n%s\nreader 0\n%s", i, b, bodies[0])
		}
	}
	if cart := find(decodeAs[[]wire.ServiceSummary](t, reply{Status: http.StatusOK, Body: bodies[0]}), "shop", "cart"); cart == nil || cart.Instances != 1 {
		t.Errorf("after registering c-1, the readers got shop/cart %+v, want 1 instance", cart)
	}
	if got := e.metric(t, listBuilds, nil); got != built+1 {
		t.Errorf("%d readers at one new revision built the list %v times, want once", readers, got-built)
	}
	built++

	// A write: the next request builds the list again, with it.
	e.register(t, "", "shop", "web", "i-2", "10.0.0.2")
	list := decodeAs[[]wire.ServiceSummary](t, reply{Status: http.StatusOK, Body: fetch()})
	if got := e.metric(t, listBuilds, nil); got != built+1 {
		t.Errorf("after a write, %v builds, want 1", got-built)
	}
	if web := find(list, "shop", "web"); web == nil || web.Instances != 2 {
		t.Errorf("after registering i-2, shop/web is %+v, want 2 instances", web)
	}

	// A new table (another round of the evaluator): built again.
	e.tick(t)
	fetch()
	fetch()
	if got := e.metric(t, listBuilds, nil); got != built+2 {
		t.Errorf("after a new table, %v builds, want 2", got-built)
	}
}

// TestServiceListEncoding: the list as served (rows encoded once, then
// picked per token) is byte for byte what encoding the rows a token may
// read gives, for a token that reads all, one that reads some, and one
// that reads none.
func TestServiceListEncoding(t *testing.T) {
	e, _ := newACLEnv(t, options{})
	for _, tc := range []struct {
		name, secret string
		want         []string
	}{
		{"admin", adminSecret, []string{"other/web", "shop/cart", "shop/web"}},
		{"reader of shop", readerSecret, []string{"shop/cart", "shop/web"}},
		{"instance of shop/web", instanceSecret, []string{"shop/web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.call(t, http.MethodGet, "/v1/services", tc.secret, "")
			wantStatus(t, r, http.StatusOK)
			list := decodeAs[[]wire.ServiceSummary](t, r)
			var got []string
			for _, s := range list {
				got = append(got, s.Namespace+"/"+s.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("listed %v, want %v", got, tc.want)
			}
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetIndent("", "  ")
			if err := enc.Encode(list); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.Body, want.Bytes()) {
				t.Errorf("body\n%s\nwant it encoded as the API encodes\n%s", r.Body, want.Bytes())
			}
		})
	}

	// A namespace with no service: an empty array, as before.
	bare := newEnv(t, options{})
	r := bare.call(t, http.MethodGet, "/v1/services", "", "")
	wantStatus(t, r, http.StatusOK)
	if string(r.Body) != "[]\n" {
		t.Errorf("no services: body %q, want %q", r.Body, "[]\n")
	}
}

// TestStatusXDSSummaryOncePerSecond: GET /v1/status, which every open
// dashboard polls once a second and which walks every xDS stream for its
// summary, takes the summary at most once a second whatever the number
// of callers.
func TestStatusXDSSummaryOncePerSecond(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	var mu sync.Mutex
	calls := 0
	e := newEnv(t, options{now: clk.Now, xdsSummary: func() wire.XDSSummary {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return wire.XDSSummary{Streams: calls}
	}})
	get := func() int {
		r := e.call(t, http.MethodGet, "/v1/status", "", "")
		wantStatus(t, r, http.StatusOK)
		st := decodeAs[wire.Status](t, r)
		if st.XDS == nil {
			t.Fatalf("status %s has no xds", r.Body)
		}
		return st.XDS.Streams
	}
	for range 10 {
		if got := get(); got != 1 {
			t.Fatalf("the summary of call %d, want the first", got)
		}
	}
	clk.Advance(999 * time.Millisecond)
	if got := get(); got != 1 {
		t.Errorf("999 ms later: the summary of call %d, want the first", got)
	}
	clk.Advance(time.Millisecond)
	if got := get(); got != 2 {
		t.Errorf("a second later: the summary of call %d, want a new one (2)", got)
	}
	if got := get(); got != 2 {
		t.Errorf("the summary of call %d, want the second", got)
	}
}

func find(list []wire.ServiceSummary, ns, name string) *wire.ServiceSummary {
	for i := range list {
		if list[i].Namespace == ns && list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// TestServiceListGzip: a caller that takes gzip (every browser, and Go's
// client) gets the whole list gzipped once per build; what it unpacks is
// the plain body. A list filtered for a token, and a caller that does not
// take gzip, get the plain body.
func TestServiceListGzip(t *testing.T) {
	e, _ := newACLEnv(t, options{})
	get := func(secret, accept string) reply {
		hdr := map[string]string{"Authorization": "Bearer " + secret}
		if accept != "" {
			hdr["Accept-Encoding"] = accept
		}
		r := e.request(t, http.MethodGet, "/v1/services", hdr, "")
		wantStatus(t, r, http.StatusOK)
		if !slices.Contains(r.Header.Values("Vary"), "Accept-Encoding") {
			t.Errorf("Accept-Encoding %q: Vary %q, want Accept-Encoding", accept, r.Header.Values("Vary"))
		}
		return r
	}
	plain := get(adminSecret, "identity")
	if ce := plain.Header.Get("Content-Encoding"); ce != "" {
		t.Fatalf("Accept-Encoding identity: Content-Encoding %q", ce)
	}
	for _, accept := range []string{"gzip", "gzip, deflate, br, zstd", "br;q=1.0, GZIP;q=0.5", "*"} {
		r := get(adminSecret, accept)
		if ce := r.Header.Get("Content-Encoding"); ce != "gzip" {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want gzip", accept, ce)
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(r.Body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, plain.Body) {
			t.Errorf("Accept-Encoding %q: unpacked\n%s\nwant\n%s", accept, b, plain.Body)
		}
	}
	// Go's client asks for gzip itself and unpacks it.
	if r := get(adminSecret, ""); !bytes.Equal(r.Body, plain.Body) {
		t.Errorf("Go's client read\n%s\nwant\n%s", r.Body, plain.Body)
	}
	for _, accept := range []string{"gzip;q=0", "deflate, gzip; q=0.000", "*, gzip;q=0", "br"} {
		if ce := get(adminSecret, accept).Header.Get("Content-Encoding"); ce != "" {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want none", accept, ce)
		}
	}
	if ce := get(readerSecret, "gzip").Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("a list filtered for a reader: Content-Encoding %q, want none", ce)
	}
}

// TestServiceListBuildsPaced: however fast the store changes and however
// many read, builds of the list are at least listEvery (250 ms) apart, so
// a busy store does not make every dashboard's fetch a build; and each
// answer is at least as new as the store when it was asked.
func TestServiceListBuildsPaced(t *testing.T) {
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	before := e.metric(t, listBuilds, nil)
	start := time.Now()
	for i := range 12 {
		id := fmt.Sprintf("i-%d", i)
		e.register(t, "", "shop", "web", id, fmt.Sprintf("10.0.2.%d", i+1))
		list := decodeAs[[]wire.ServiceSummary](t, e.call(t, http.MethodGet, "/v1/services", "", ""))
		if web := find(list, "shop", "web"); web == nil || web.Instances != i+1 {
			t.Fatalf("after registering %s: shop/web %+v, want %d instances", id, web, i+1)
		}
	}
	elapsed := time.Since(start)
	builds := e.metric(t, listBuilds, nil) - before
	// The first build may come at once; each later one waits out the
	// rest of 250 ms since the one before.
	if most := 1 + float64(elapsed/(250*time.Millisecond)); builds > most {
		t.Errorf("%v builds in %v, want at most %v (one per 250 ms)", builds, elapsed, most)
	}
	if builds != 12 {
		t.Errorf("%v builds for 12 writes each followed by a read, want 12", builds)
	}
}
