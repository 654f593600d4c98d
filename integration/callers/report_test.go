package callers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/wire"
)

// TestAttribute: a request is counted for the instance that answered,
// or else for the endpoint at the address tried (any address × port it
// registered), only when the endpoint lists read before and after it
// was sent agree on its incarnation; an id cairn does not list is
// unattributed, not looked up by address; a request sent after the
// newest read waits for the next one.
func TestAttribute(t *testing.T) {
	d1 := newDirectory([]wire.Endpoint{
		{InstanceID: "i-0", Incarnation: 7, Addresses: []string{"127.11.0.1"}, Ports: map[string]int{"grpc": 9000, "admin": 9001}},
		{InstanceID: "i-1", Incarnation: 3, Addresses: []string{"127.12.0.1", "::1"}, Ports: map[string]int{"grpc": 9000}},
	})
	// Between the reads i-1 re-registered and i-2 appeared.
	d2 := newDirectory([]wire.Endpoint{
		{InstanceID: "i-0", Incarnation: 7, Addresses: []string{"127.11.0.1"}, Ports: map[string]int{"grpc": 9000, "admin": 9001}},
		{InstanceID: "i-1", Incarnation: 4, Addresses: []string{"127.12.0.1", "::1"}, Ports: map[string]int{"grpc": 9000}},
		{InstanceID: "i-2", Incarnation: 1, Addresses: []string{"127.13.0.1"}, Ports: map[string]int{"grpc": 9000}},
	})
	reads := []endpointRead{{start: at(1), end: at(1.05), dir: d1}, {start: at(3), end: at(3.05), dir: d2}}
	slot := func(s float64) int64 { return at(s).UnixNano() / int64(outcomeSlot) }
	held := map[outcomeKey]*outcomeCount{
		{"i-0", "127.11.0.1:9000", slot(2)}:  {success: 1},
		{"", "127.11.0.1:9001", slot(2)}:     {failure: 1},
		{"", "[::1]:9000", slot(2)}:          {timeout: 1}, // i-1 changed incarnation
		{"i-1", "", slot(2)}:                 {failure: 1}, // so did it
		{"gone", "127.12.0.1:9000", slot(2)}: {failure: 1}, // an id cairn does not know
		{"", "127.99.0.1:9000", slot(2)}:     {failure: 1},
		{"", "", slot(2)}:                    {failure: 1}, // a failed resolution
		{"", "127.13.0.1:9000", slot(2)}:     {failure: 1}, // i-2 registered meanwhile
		{"i-0", "", slot(0.5)}:               {failure: 1}, // before any read
		{"i-1", "", slot(3.5)}:               {failure: 2}, // after the newest read
	}
	rep, a := attribute("shop", "rpc", held, reads, at(0))
	if got, want := fmt.Sprint(rep.Endpoints), "[{shop rpc i-0 7 1 1 0}]"; got != want {
		t.Errorf("report %s, want %s", got, want)
	}
	if a.unattributed != 3 || a.ambiguous != 4 {
		t.Errorf("%+v, want 3 unattributed and 4 ambiguous", a)
	}
	if err := rep.Validate(); err != nil {
		t.Errorf("the report is not valid: %v", err)
	}
	if len(held) != 1 {
		t.Fatalf("held %v, want the request after the newest read only", held)
	}
	// The next read: the request is i-1's new incarnation's, never the
	// old one's.
	reads = append(reads, endpointRead{start: at(4), end: at(4.05), dir: d2})
	rep, _ = attribute("shop", "rpc", held, reads, at(0))
	if got, want := fmt.Sprint(rep.Endpoints), "[{shop rpc i-1 4 0 2 0}]"; got != want || len(held) != 0 {
		t.Errorf("report %s, want %s", got, want)
	}
	// No read for long: dropped, not kept forever.
	held[outcomeKey{"i-0", "", slot(5)}] = &outcomeCount{success: 1}
	if _, a := attribute("shop", "rpc", held, reads, at(9)); a.ambiguous != 1 || len(held) != 0 {
		t.Errorf("a stale slot: %+v, held %v", a, held)
	}
}

// TestRecorderPastTheCap: past MaxRecorded, requests are not kept but
// still counted, per second and in the outcome counters a Reporter
// drains, so a caller keeps reporting and the analysis keeps its data.
func TestRecorderPastTheCap(t *testing.T) {
	r := recorder{max: 2}
	if !r.startTracking() || r.startTracking() {
		t.Fatal("startTracking: want true once")
	}
	for i := range 5 {
		r.add(Request{At: at(0.1 + float64(i)*0.5), Instance: "i-0", Result: Result(i % 3)})
	}
	r.skip(at(2.2))
	rec := r.snapshot()
	if len(rec.Requests) != 2 || rec.Dropped != 3 || rec.Skipped != 1 {
		t.Fatalf("kept %d, dropped %d, skipped %d", len(rec.Requests), rec.Dropped, rec.Skipped)
	}
	if got := fmt.Sprint(rec.Seconds); got != "[{2 1 1 0 0} {2 1 0 1 0} {1 0 1 0 1}]" || !rec.Origin.Equal(t0) {
		t.Errorf("seconds %s from %v", got, rec.Origin)
	}
	n := 0
	for _, c := range r.drain() {
		n += c.success + c.failure + c.timeout
	}
	if n != 5 {
		t.Errorf("drained %d requests, want 5", n)
	}
	if len(r.drain()) != 0 {
		t.Error("a second drain returned the same counts")
	}
	// A snapshot is not disturbed by later requests.
	r.max = 10
	r.add(Request{At: at(2.5)})
	if len(rec.Requests) != 2 || cap(rec.Requests) != 2 {
		t.Errorf("the snapshot grew: %d", len(rec.Requests))
	}
	b := Buckets([]Record{rec}, t0, at(3), time.Second)[""]
	if fmt.Sprint(b) != "[{0 2 1 0 0} {1 2 0 1 0} {2 1 1 0 1}]" {
		t.Errorf("buckets past the cap %v", b)
	}
}

func TestConfigErrors(t *testing.T) {
	ok := DNSConfig{Config: Config{Name: "d", Rate: 1}, Server: "127.0.0.1:53", Query: "web.shop.svc.cairn.internal.", Port: 80, Protocol: HTTP}
	for _, c := range []struct {
		edit func(*DNSConfig)
		kind Kind
		want string
	}{
		{func(*DNSConfig) {}, Envoy, "kind"},
		{func(c *DNSConfig) { c.Name = "" }, DNSDirect, "Config.Name"},
		{func(c *DNSConfig) { c.Rate = 0 }, DNSDirect, "Config.Rate"},
		{func(c *DNSConfig) { c.Rate = 1e-10 }, DNSDirect, "Config.Rate"}, // NewTicker would panic
		{func(c *DNSConfig) { c.Timeout = -1 }, DNSDirect, "Config.Timeout"},
		{func(c *DNSConfig) { c.Server = "127.0.0.1" }, DNSDirect, "DNSConfig.Server"},
		{func(c *DNSConfig) { c.Query = "a..b" }, DNSDirect, "DNSConfig.Query"},
		{func(c *DNSConfig) { c.Port = 0 }, DNSAgent, "DNSConfig.Port"},
		{func(c *DNSConfig) { c.Protocol = "udp" }, DNSAgent, "protocol"},
	} {
		cfg := ok
		c.edit(&cfg)
		if _, err := NewDNS(c.kind, cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s", c.want, err, c.want)
		}
	}
	if _, err := NewGRPC(GRPCConfig{Config: Config{Name: "g", Rate: 1}, Target: "rpc"}); err == nil || !strings.Contains(err.Error(), "Target") {
		t.Errorf("a target without a namespace: %v", err)
	}
	// A valid one made and never run holds nothing (goleak, TestMain).
	if _, err := NewGRPC(GRPCConfig{Config: Config{Name: "g", Rate: 1}, Target: "rpc.shop",
		Bootstrap: []byte(`{"xds_servers":[{"server_uri":"127.0.0.1:1","channel_creds":[{"type":"insecure"}]}],"node":{"id":"g"}}`)}); err != nil {
		t.Fatal(err)
	}
	for boot, want := range map[string]string{
		`{}`: "xds_servers is required",
		`[]`: "JSON object",
		`{"xds_servers": [{"server_uri": "x:1"}]}`: "xds_servers[0] needs",
	} {
		if _, err := NewGRPC(GRPCConfig{Config: Config{Name: "g", Rate: 1}, Target: "rpc.shop", Bootstrap: []byte(boot)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bootstrap %s: %v, want an error naming %q", boot, err, want)
		}
	}
	if _, err := NewReporter(ReporterConfig{}); err == nil || !strings.Contains(err.Error(), "Caller") {
		t.Errorf("a reporter of no caller: %v", err)
	}
	env, err := NewEnvoy(EnvoyConfig{Config: Config{Name: "e", Rate: 1}, URL: "http://127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.New("http://127.0.0.1:1", "")
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if _, err := NewReporter(ReporterConfig{Caller: env, API: api, Namespace: "shop", Service: "rpc"}); err == nil || !strings.Contains(err.Error(), "blind") {
		t.Errorf("a reporter of an Envoy caller: %v", err)
	}
	dc, err := NewDNS(DNSDirect, ok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewReporter(ReporterConfig{Caller: dc, API: api, Namespace: "shop", Service: "rpc"}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewReporter(ReporterConfig{Caller: dc, API: api, Namespace: "shop", Service: "rpc"}); err == nil || !strings.Contains(err.Error(), "Reporter already") {
		t.Errorf("a second reporter of one caller: %v", err)
	}
	if b, err := WithToken([]byte(`{"xds_servers":[{"server_uri":"x:1","channel_creds":[{"type":"insecure"}]}]}`), "s3cret"); err != nil ||
		!strings.Contains(string(b), `"channel_creds":[{"config":{"token":"s3cret"},"type":"cairn-bearer"}]`) {
		t.Errorf("WithToken: %s, %v", b, err)
	}
}
