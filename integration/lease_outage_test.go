package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// Leases of 5 s, so that 35 s without a leader is past their hard expiry
// (5 × TTL).
const outageDef = `namespace: shop
name: leased
ports: [{name: http, number: 8080, protocol: tcp}]
capability: {readiness: none}
policy: {dns_ttl: 5s, lease_ttl: 5s}
`

// registrar renews every instance once a second through whichever node
// answers, as a registrar that knows every server would, until ctx ends.
// It counts the renewals accepted and those refused as fenced (409),
// each from the time it is told to look.
type registrar struct {
	c       *Cluster
	insts   []wire.Instance
	ok      atomic.Int64
	mu      sync.Mutex
	fenced  []string
	counted atomic.Bool
}

func (r *registrar) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	next := 0
	for {
		for _, in := range r.insts {
			live := r.c.Live()
			for range live {
				n := live[next%len(live)]
				next++
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := n.Client().Renew(cctx, in.Key(), in.Incarnation)
				cancel()
				var ce *client.Error
				if err == nil {
					if r.counted.Load() {
						r.ok.Add(1)
					}
					break
				}
				if errors.As(err, &ce) && ce.Status == http.StatusConflict && r.counted.Load() {
					r.mu.Lock()
					r.fenced = append(r.fenced, fmt.Sprintf("%s via %s: %v", in.ID, n.ID, err))
					r.mu.Unlock()
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// leasedAnswer is the A records n's DNS server gives for name, sorted.
func leasedAnswer(n *Node, name string) ([]string, []uint16, error) {
	got, _, edes, rcode, err := staleAnswer(n, name)
	if err == nil && rcode != dns.RcodeSuccess {
		err = fmt.Errorf("%s answers %s", n.ID, dns.RcodeToString[rcode])
	}
	return got, edes, err
}

// TestQuorumLossExpiresNoLease: three nodes, four instances with a 5 s
// lease and a registrar renewing every second through any node. Two
// nodes are killed for 35 s, past every lease's hard expiry: the survivor
// answers all four throughout (stale); once the two are back every node
// answers all four, renewals are accepted again without registering
// anew, and no instance expired. Time without a leader never counts
// against a lease (SPEC §2).
func TestQuorumLossExpiresNoLease(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, "--allow-loopback-endpoints", "--stale-after", "2s")
	ctx := t.Context()
	applyDefinition(ctx, t, c, outageDef)
	want := []string{"127.0.0.31", "127.0.0.32", "127.0.0.33", "127.0.0.34"}
	reg := &registrar{c: c}
	for i, a := range want {
		addr := a
		onAnyNode(t, c, "register", func(n *Node) error {
			r, err := n.Client().Register(ctx, "shop", "leased", wire.Registration{ID: fmt.Sprintf("l%d", i+1),
				Addresses: []string{addr}, Ports: map[string]int{"http": 8080}})
			if err == nil {
				reg.insts = append(reg.insts, r.Instance)
			}
			return err
		})
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); reg.run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	const name = "leased.shop.svc.cairn.internal."
	for _, n := range c.Live() {
		Eventually(t, 20*time.Second, func() error {
			got, edes, err := leasedAnswer(n, name)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) || len(edes) != 0 {
				return fmt.Errorf("%s answers %v EDE %v; want %v fresh", n.ID, got, edes, want)
			}
			return nil
		})
	}

	leader, err := c.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var survivor *Node
	var killed []*Node
	for _, n := range c.Live() {
		if n != leader && survivor == nil {
			survivor = n
			continue
		}
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, n)
	}
	t.Logf("killed %s and %s; %s survives", killed[0].ID, killed[1].ID, survivor.ID)

	// 35 s without a leader, seven lease TTLs: the survivor answers all
	// four throughout, from its last table.
	outage := time.Now().Add(35 * time.Second)
	for asks := 0; time.Now().Before(outage); asks++ {
		got, edes, err := leasedAnswer(survivor, name)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("survivor, %s into the outage (ask %d): %v EDE %v err %v; want %v",
				time.Until(outage).Round(time.Second), asks, got, edes, err, want)
		}
		time.Sleep(200 * time.Millisecond) // a client's pace, not a wait for a condition
	}

	reg.counted.Store(true)
	for _, n := range killed {
		if err := n.Restart(); err != nil {
			t.Fatalf("restarting %s: %v\n%s", n.ID, err, c.Logs(40))
		}
	}
	// Every node answers all four, fresh, and the registrar's renewals
	// are accepted again.
	for _, n := range c.Live() {
		Eventually(t, 30*time.Second, func() error {
			got, edes, err := leasedAnswer(n, name)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) || slices.Contains(edes, dns.ExtendedErrorCodeStaleAnswer) {
				return fmt.Errorf("%s answers %v EDE %v after the outage; want %v fresh", n.ID, got, edes, want)
			}
			return nil
		})
	}
	Eventually(t, 30*time.Second, func() error {
		if n := reg.ok.Load(); n < int64(3*len(want)) {
			return fmt.Errorf("%d renewals accepted since the restart, want at least %d", n, 3*len(want))
		}
		return nil
	})
	reg.mu.Lock()
	fenced := slices.Clone(reg.fenced)
	reg.mu.Unlock()
	if len(fenced) > 0 {
		t.Errorf("renewals refused as fenced after the outage: %v", fenced)
	}
	// The registrations are the same incarnations, none expired.
	evs, err := survivor.Client().Events(ctx, "shop", "leased", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == wire.EventExpired || e.Kind == wire.EventExpiryHeld {
			t.Errorf("audit event after the outage: %+v", e)
		}
	}
	eps, err := survivor.Client().Endpoints(ctx, "shop", "leased")
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		i := slices.IndexFunc(reg.insts, func(in wire.Instance) bool { return in.ID == ep.InstanceID })
		if i < 0 || ep.Incarnation != reg.insts[i].Incarnation || ep.Lifecycle == status.Terminated {
			t.Errorf("endpoint %s incarnation %d %s; want one of the four registered, not terminated", ep.InstanceID, ep.Incarnation, ep.Lifecycle)
		}
	}
}
