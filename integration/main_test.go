package integration

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/wire"
)

func TestMain(m *testing.M) {
	if addrs := os.Getenv(backendEnv); addrs != "" {
		serveBackends(addrs) // a backend process of the partition tests: never returns
	}
	if spec := os.Getenv(renewerEnv); spec != "" {
		renew(spec) // an instance process of the crash test: never returns
	}
	code := m.Run()
	RemoveBinary()
	os.Exit(code)
}

// needProcesses is NeedProcesses.
func needProcesses(t *testing.T) {
	t.Helper()
	NeedProcesses(t)
}

const (
	testNS  = "shop"
	testSvc = "cart"
)

// testService is the definition the tests apply: a long drain window so
// that a drained instance stays draining for the whole test.
const testService = `namespace: shop
name: cart
ports: [{name: http, number: 8080, protocol: tcp}]
policy:
  drain_window: 1h
  lease_ttl: 10m
`

// registration returns a registration of instance id. The address is in
// 10/8: never dialled, and accepted without --dev.
func registration(id string, i int) wire.Registration {
	return wire.Registration{
		ID:        id,
		Addresses: []string{fmt.Sprintf("10.0.%d.%d", (i/250)%250, i%250+1)},
		Ports:     map[string]int{"http": 8080},
	}
}

// ctxT returns a context bounded by d that ends with the test.
func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// applyService applies testService through any live node, retrying while
// the answer is 503 or no answer: a leader change can interrupt it, and
// applying the same definition twice changes nothing.
func applyService(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	var last error
	err := Poll(30*time.Second, 100*time.Millisecond, func() error {
		for _, n := range c.Live() {
			_, last = n.Client().Apply(ctx, []byte(testService))
			if last == nil {
				return nil
			}
			if !client.IsRetryable(last) {
				return &stopPolling{fmt.Errorf("apply via %s: %w", n.ID, last)}
			}
		}
		return fmt.Errorf("apply: %w", last)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// incarnations returns instance id → incarnation as cl's replica sees
// them.
func incarnations(ctx context.Context, cl *client.Client) (map[string]uint64, error) {
	eps, err := cl.Endpoints(ctx, testNS, testSvc)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(eps))
	for _, e := range eps {
		out[e.InstanceID] = e.Incarnation
	}
	return out, nil
}
