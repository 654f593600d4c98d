package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/wire"
)

// servedWeight is one endpoint as served: its SRV priority (the tier) and
// weight.
type servedWeight struct{ Tier, Weight int }

// TestEndpointsAgreeWithDig: `cairn -o json endpoints` shows the weights
// and tiers the node's DNS server serves, from the registrations on and
// through slow start: at every status table version that holds still
// across the comparison (the view before and after the query names the
// same table), the eligible endpoints of the view are the SRV records dig
// gets, with their weights and priorities. They used to disagree: right
// after a registration the view said weight 100 while DNS served nothing
// and then the slow-start 10 (issue 26 item 7).
func TestEndpointsAgreeWithDig(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	bin := needTool(t, "dig", "bind9-dnsutils")
	c := StartCluster(t, 1, append(healthArgs, "--region", "r1", "--zone", "z1")...)
	ctx := ctxT(t, 2*time.Minute)
	n := c.Nodes[0]
	const svc = "agree"
	applyDefinition(ctx, t, c, healthService(svc, "", "{lease_ttl: 10m, drain_window: 1h, slow_start: 30s}"))
	places := map[string][2]string{"a-0": {"r1", "z1"}, "a-1": {"r1", "z2"}, "a-2": {"r2", "z3"}}
	for i, id := range []string{"a-0", "a-1", "a-2"} {
		registerLoopback(ctx, t, c, svc, id, 8080, func(r *wire.Registration) {
			r.Addresses = []string{fmt.Sprintf("127.0.0.%d", 71+i)}
			r.Region, r.Zone = places[id][0], places[id][1]
		})
	}

	// view is the endpoints view: the eligible endpoints' tiers and
	// weights, and the one table version every row was read from.
	view := func() (map[string]servedWeight, uint64, error) {
		var eps []wire.Endpoint
		if err := json.Unmarshal(runCLI(ctx, t, n, "-o", "json", "endpoints", healthNS+"/"+svc), &eps); err != nil {
			return nil, 0, err
		}
		out := map[string]servedWeight{}
		var version uint64
		for i, e := range eps {
			if i > 0 && e.TableVersion != version {
				return nil, 0, fmt.Errorf("rows from tables %d and %d in one view", version, e.TableVersion)
			}
			version = e.TableVersion
			if !e.Eligible {
				continue
			}
			w := servedWeight{Tier: -1, Weight: e.Weight} // no tier: no SRV priority matches
			if e.Tier != nil {
				w.Tier = *e.Tier
			}
			out[e.InstanceID] = w
		}
		return out, version, nil
	}
	srvName := fmt.Sprintf("_http._tcp.%s.%s.svc.cairn.internal.", svc, healthNS)
	srv := func() map[string]servedWeight {
		out := map[string]servedWeight{}
		for _, rr := range dig(t, bin, n.DNSAddr, "+norec", srvName, "SRV").answer {
			s, ok := rr.(*dns.SRV)
			if !ok {
				continue
			}
			id, _, _ := strings.Cut(s.Target, ".")
			out[id] = servedWeight{Tier: int(s.Priority), Weight: int(s.Weight)}
		}
		return out
	}

	// Compare from the registrations on for 8 s: the slow start's first
	// rounds, each weight rising at every table.
	var compared, sloped int
	end := time.Now().Add(8 * time.Second)
	for time.Now().Before(end) {
		before, v1, err := view()
		if err != nil {
			t.Fatal(err)
		}
		dug := srv()
		_, v2, err := view()
		if err != nil {
			t.Fatal(err)
		}
		if v1 != v2 {
			continue // a table was published meanwhile: DNS answered from one of the two
		}
		if !maps.Equal(before, dug) {
			t.Fatalf("at status table %d, cairn endpoints serves %v and dig gets %v", v1, before, dug)
		}
		compared++
		for _, w := range dug {
			if w.Weight > 0 && w.Weight < 100 {
				sloped++
				break
			}
		}
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if compared < 5 || sloped == 0 {
		t.Fatalf("%d comparisons at a stable table, %d of them in slow start; want at least 5, and one in slow start", compared, sloped)
	}
	t.Logf("%d comparisons at a stable table, %d in slow start", compared, sloped)
	// The tiers are the node's (r1/z1) view of each endpoint's place.
	want := map[string]int{"a-0": 0, "a-1": 1, "a-2": 2}
	Eventually(t, 10*time.Second, func() error {
		got, _, err := view()
		if err != nil {
			return err
		}
		for id, tier := range want {
			if w, ok := got[id]; !ok || w.Tier != tier {
				return fmt.Errorf("tiers %v; want %v", got, want)
			}
		}
		return nil
	})
}
