package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
	"github.com/miekg/dns"
)

// A service without a check: the answer depends on registrations only.
const staleDef = `namespace: shop
name: stale
ports: [{name: http, number: 8080, protocol: tcp}]
capability: {readiness: none}
policy: {dns_ttl: 60s, lease_ttl: 1h}
`

// staleAnswer asks n's DNS server for name and returns the A records,
// the smallest TTL and the EDE codes.
func staleAnswer(n *Node, name string) (addrs []string, minTTL uint32, edes []uint16, rcode int, err error) {
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	q.SetEdns0(1232, false)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(q, n.DNSAddr)
	if err != nil {
		return nil, 0, nil, 0, err
	}
	minTTL = ^uint32(0)
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			addrs = append(addrs, a.A.String())
			minTTL = min(minTTL, a.Hdr.Ttl)
		}
	}
	slices.Sort(addrs)
	return addrs, minTTL, edeCodes(r), r.Rcode, nil
}

// With two of three servers killed, the survivor has no leader: it keeps
// answering from its last table, marked stale (EDE 3) with TTLs capped at
// 30 s, and an unknown name gets a stale NXDOMAIN (EDE 19).
func TestDNSServeStaleSurvivor(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, "--allow-loopback-endpoints", "--stale-after", "2s")
	ctx := t.Context()
	applyDefinition(ctx, t, c, staleDef)
	want := []string{"127.0.0.21", "127.0.0.22", "127.0.0.23"}
	for i, a := range want {
		addr := a
		onAnyNode(t, c, "register", func(n *Node) error {
			_, err := n.Client().Register(ctx, "shop", "stale", wire.Registration{ID: fmt.Sprintf("s%d", i+1),
				Addresses: []string{addr}, Ports: map[string]int{"http": 8080}})
			return err
		})
	}
	const name = "stale.shop.svc.cairn.internal."
	// Every node answers all three, fresh.
	for _, n := range c.Live() {
		Eventually(t, 20*time.Second, func() error {
			got, ttl, edes, _, err := staleAnswer(n, name)
			switch {
			case err != nil:
				return err
			case !slices.Equal(got, want) || ttl != 60 || len(edes) != 0:
				return fmt.Errorf("%s answers %v ttl %d EDE %v; want %v, ttl 60, no EDE", n.ID, got, ttl, edes, want)
			}
			return nil
		})
	}
	leader, err := c.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Kill the leader and one follower; keep the other follower.
	var survivor *Node
	for _, n := range c.Live() {
		if n != leader && survivor == nil {
			survivor = n
			continue
		}
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("killed all but %s", survivor.ID)
	Eventually(t, 20*time.Second, func() error {
		got, ttl, edes, rcode, err := staleAnswer(survivor, name)
		switch {
		case err != nil:
			return err
		case rcode != dns.RcodeSuccess || !slices.Equal(got, want):
			return fmt.Errorf("survivor answers %s %v; want %v", dns.RcodeToString[rcode], got, want)
		case !slices.Contains(edes, dns.ExtendedErrorCodeStaleAnswer) || ttl > 30:
			return fmt.Errorf("survivor answers ttl %d EDE %v; want EDE 3 and ttl <= 30", ttl, edes)
		}
		return nil
	})
	// It keeps answering for as long as we ask (well inside max-stale).
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		got, ttl, edes, _, err := staleAnswer(survivor, name)
		if err != nil || !slices.Equal(got, want) || ttl > 30 || !slices.Contains(edes, dns.ExtendedErrorCodeStaleAnswer) {
			t.Fatalf("survivor answered %v ttl %d EDE %v err %v; want the stale answer", got, ttl, edes, err)
		}
	}
	_, _, edes, rcode, err := staleAnswer(survivor, "gone.shop.svc.cairn.internal.")
	if err != nil || rcode != dns.RcodeNameError || !slices.Contains(edes, dns.ExtendedErrorCodeStaleNXDOMAINAnswer) {
		t.Fatalf("unknown name: %s EDE %v err %v; want NXDOMAIN with EDE 19", dns.RcodeToString[rcode], edes, err)
	}
}
