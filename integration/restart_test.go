package integration

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/cmd"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/wire"
)

// TestRestartWithoutQuorumServesKeptTable: a three-node cluster is
// stopped and one node restarted alone, without quorum. Its replica holds
// only its latest raft snapshot, if any; it answers every name it served
// before it stopped, marked stale (EDE 3), from the table it kept on disk
// — never NXDOMAIN — from the first answer on. Once a second node is back
// and the replica has caught up, the answers are fresh again (SPEC §7).
func TestRestartWithoutQuorumServesKeptTable(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, "--allow-loopback-endpoints")
	ctx := ctxT(t, 3*time.Minute)
	applyDefinition(ctx, t, c, staleDef)
	want := []string{"127.0.0.31", "127.0.0.32", "127.0.0.33"}
	var rev uint64
	for i, a := range want {
		addr := a
		onAnyNode(t, c, "register", func(n *Node) error {
			r, err := n.Client().Register(ctx, "shop", "stale", wire.Registration{ID: fmt.Sprintf("s%d", i+1),
				Addresses: []string{addr}, Ports: map[string]int{"http": 8080}})
			rev = max(rev, r.SourceRevision)
			return err
		})
	}
	const name = "stale.shop.svc.cairn.internal."
	names := []string{name, "s1.stale.shop.svc.cairn.internal.", "s3.stale.shop.svc.cairn.internal."}
	for _, n := range c.Live() {
		Eventually(t, 20*time.Second, func() error {
			got, _, edes, _, err := staleAnswer(n, name)
			if err != nil || !slices.Equal(got, want) || len(edes) != 0 {
				return fmt.Errorf("%s answers %v EDE %v (%v); want %v fresh", n.ID, got, edes, err, want)
			}
			// Every node has kept a table with all three on disk.
			s, err := tablefile.Load(filepath.Join(n.DataDir, cmd.TableFile))
			if err != nil || s == nil || s.Revision < rev {
				return fmt.Errorf("%s: kept table %v (%v); want one at revision %d or later", n.ID, s, err, rev)
			}
			return nil
		})
	}
	for _, n := range c.Nodes {
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
	}

	// One node alone: no leader, no quorum.
	n := c.Nodes[1]
	start := time.Now()
	if err := n.Respawn(); err != nil {
		t.Fatal(err)
	}
	var first time.Duration
	Eventually(t, 10*time.Second, func() error {
		_, _, _, _, err := staleAnswer(n, name)
		if err == nil && first == 0 {
			first = time.Since(start)
		}
		return err
	})
	t.Logf("%s restarted alone: first DNS answer %v after start", n.ID, first)
	if first > time.Second {
		t.Errorf("%s answered %v after start; want within 1s", n.ID, first)
	}
	// From the first answer on, for 5s: every name, stale, never NXDOMAIN.
	end := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		for _, q := range names {
			got, _, edes, rcode, err := staleAnswer(n, q)
			if err != nil {
				t.Fatal(err)
			}
			if rcode != dns.RcodeSuccess || len(got) == 0 || !slices.Contains(edes, dns.ExtendedErrorCodeStaleAnswer) {
				t.Fatalf("%s restarted without quorum answers %s: rcode %s, %v, EDE %v; want NOERROR, the addresses, EDE 3\n%s",
					n.ID, q, dns.RcodeToString[rcode], got, edes, n.Tail(30))
			}
			if q == name && !slices.Equal(got, want) {
				t.Fatalf("%s answers %v, want %v", n.ID, got, want)
			}
		}
		time.Sleep(100 * time.Millisecond) // the cadence of the check
	}

	// Quorum again: the replica catches up and the answers are fresh.
	if err := c.Nodes[2].Respawn(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		got, _, edes, _, err := staleAnswer(n, name)
		if err != nil || !slices.Equal(got, want) || len(edes) != 0 {
			return fmt.Errorf("%s answers %v EDE %v (%v); want %v fresh", n.ID, got, edes, err, want)
		}
		return nil
	})
}
