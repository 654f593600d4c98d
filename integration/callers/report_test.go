package callers

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/wire"
)

// TestDirectory: a request is counted for the instance that answered,
// or else for the endpoint at the address tried (any address × port it
// registered), with that endpoint's incarnation; the rest is
// unattributed.
func TestDirectory(t *testing.T) {
	d := newDirectory([]wire.Endpoint{
		{InstanceID: "i-0", Incarnation: 7, Addresses: []string{"127.11.0.1"}, Ports: map[string]int{"grpc": 9000, "admin": 9001}},
		{InstanceID: "i-1", Incarnation: 3, Addresses: []string{"127.12.0.1", "::1"}, Ports: map[string]int{"grpc": 9000}},
	})
	reqs := []Request{
		{Instance: "i-0", Addr: "127.11.0.1:9000", Result: Success},
		{Addr: "127.11.0.1:9001", Result: Failure},
		{Addr: "[::1]:9000", Result: Timeout},
		{Instance: "i-1", Result: Success},
		{Instance: "gone", Addr: "127.12.0.1:9000", Result: Failure}, // an id cairn does not know: by address
		{Addr: "127.99.0.1:9000", Result: Failure},
		{Result: Failure}, // a failed resolution
	}
	rep, un := d.outcomes("shop", "rpc", reqs)
	if un != 2 {
		t.Errorf("%d unattributed, want 2", un)
	}
	got := fmt.Sprint(rep.Endpoints)
	want := "[{shop rpc i-0 7 1 1 0} {shop rpc i-1 3 1 1 1}]"
	if got != want {
		t.Errorf("report %s, want %s", got, want)
	}
	if err := rep.Validate(); err != nil {
		t.Errorf("the report is not valid: %v", err)
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
	if _, err := NewReporter(ReporterConfig{}); err == nil || !strings.Contains(err.Error(), "Caller") {
		t.Errorf("a reporter of no caller: %v", err)
	}
	if b, err := WithToken([]byte(`{"xds_servers":[{"server_uri":"x:1","channel_creds":[{"type":"insecure"}]}]}`), "s3cret"); err != nil ||
		!strings.Contains(string(b), `"channel_creds":[{"config":{"token":"s3cret"},"type":"cairn-bearer"}]`) {
		t.Errorf("WithToken: %s, %v", b, err)
	}
}
