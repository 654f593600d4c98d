package probe_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/cairn-sd/cairn/probe"
)

// Each node computes the same two observers for a target from the live
// members; the evaluator keeps a result only from one of them.
func ExampleAssign() {
	members := []string{"node-a", "node-b", "node-c"}
	id := "shop/cart/i-1#7"
	fmt.Println(probe.Assign(id, members, 2))
	for _, m := range members {
		fmt.Println(m, probe.Assigned(id, m, members, 2))
	}
	// Output:
	// [node-b node-a]
	// node-a true
	// node-b true
	// node-c false
}

// How a node wires a Prober: the targets Assign gives it go to SetTargets,
// Run runs under the node's errgroup, and the evaluator reads Batches.
func ExampleProber() {
	p, err := probe.New(probe.Config{Observer: "node-a", Capacity: 100})
	if err != nil {
		panic(err)
	}
	err = p.SetTargets([]probe.Target{{
		ID:       "shop/cart/i-1#7",
		Kind:     probe.HTTP,
		Addr:     netip.MustParseAddrPort("127.0.0.1:8080"),
		Path:     "/healthz",
		Interval: 5 * time.Second,
		Timeout:  time.Second,
	}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() {
		for b := range p.Batches() { // closed when Run returns
			for _, r := range b.Results {
				if r.TargetID != "" { // an unused slot otherwise
					_ = r.OK
				}
			}
		}
	}()
	_ = p.Run(ctx)
}
