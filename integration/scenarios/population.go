package scenarios

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration/callers"
	"github.com/cairn-sd/cairn/xdsserver"
)

// PopulationConfig is a population of synthetic callers on a region.
type PopulationConfig struct {
	// Kinds are the client kinds; Per callers of each.
	Kinds []callers.Kind
	Per   int
	// Rate is each caller's requests per second; Timeout its
	// per-request deadline (1 s if zero).
	Rate    float64
	Timeout time.Duration
	// Service is the service the callers of a kind call.
	Service func(callers.Kind) ServiceSpec
	// FirstToken is the first caller token (Region.CallerToken) the
	// population uses; it uses Per×len(Kinds) from there.
	FirstToken int
}

// Population is a running population of callers and their reporters.
type Population struct {
	Callers   []*callers.Caller
	Reporters []*callers.Reporter
	// Start is when the callers started.
	Start time.Time
	// Stop stops every caller and reporter and waits for them; it runs
	// when the test ends too.
	Stop func()
}

// Snap returns every caller's record so far.
func (p *Population) Snap() []callers.Record {
	out := make([]callers.Record, 0, len(p.Callers))
	for _, c := range p.Callers {
		out = append(out, c.Snapshot())
	}
	return out
}

// StartPopulation starts cfg.Per callers of each of cfg.Kinds, caller i
// of a kind in zone Zones()[i%3] (a DNS-direct caller asks its zone's
// server from an address of the zone's subnet, a DNS-agent caller its
// zone's agent, a grpc-go caller streams from its zone's server), each
// with a caller token of its own and a Reporter of its outcomes; they
// run until Stop or t's end.
func StartPopulation(t *testing.T, r *Region, cfg PopulationConfig) *Population {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	p := &Population{}
	tok := cfg.FirstToken
	for _, k := range cfg.Kinds {
		svc := cfg.Service(k)
		for i := range cfg.Per {
			z := Zones()[i%len(Zones())]
			node := r.Node(z)
			ccfg := callers.Config{Name: fmt.Sprintf("%s-%d", k, i), Rate: cfg.Rate, Timeout: cfg.Timeout}
			dns := callers.DNSConfig{Config: ccfg, Server: node.DNSAddr, Query: svc.Name + "." + Namespace + ".svc.cairn.internal.",
				Port: svc.Port, Protocol: callers.HTTP, Source: net.ParseIP(fmt.Sprintf("127.%d.200.%d", ZoneOctet(z), tok%250+1))}
			var cl *callers.Caller
			var err error
			switch k {
			case callers.DNSDirect:
				cl, err = callers.NewDNS(k, dns)
			case callers.DNSAgent:
				dns.Server = r.Agent(z).DNSAddr
				cl, err = callers.NewDNS(k, dns)
			case callers.GRPCXDS:
				var boot []byte
				boot, err = xdsserver.Bootstrap(xdsserver.BootstrapConfig{Server: node.GRPCAddr, NodeID: ccfg.Name})
				if err == nil {
					cl, err = callers.NewGRPC(callers.GRPCConfig{Config: ccfg, Bootstrap: boot, Target: svc.Name + "." + Namespace, Token: r.CallerToken(tok)})
				}
			default:
				err = fmt.Errorf("scenarios: no population of kind %s yet", k)
			}
			if err != nil {
				t.Fatal(err)
			}
			api, err := client.New(node.URL(), r.CallerToken(tok))
			if err != nil {
				t.Fatal(err)
			}
			tok++
			t.Cleanup(func() { api.Close() })
			rep, err := callers.NewReporter(callers.ReporterConfig{Caller: cl, API: api, Namespace: Namespace, Service: svc.Name})
			if err != nil {
				t.Fatal(err)
			}
			p.Callers, p.Reporters = append(p.Callers, cl), append(p.Reporters, rep)
		}
	}
	p.Start = time.Now()
	ctx, stopAll := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range p.Callers {
		wg.Go(func() { _ = c.Run(ctx) })
	}
	for _, rep := range p.Reporters {
		wg.Go(func() { _ = rep.Run(ctx) })
	}
	p.Stop = sync.OnceFunc(func() { stopAll(); wg.Wait() })
	t.Cleanup(p.Stop)
	return p
}

// Answered reports whether a caller has had a successful answer.
func Answered(r callers.Record) bool {
	for _, q := range r.Requests {
		if q.Result == callers.Success {
			return true
		}
	}
	return false
}

// AnsweredSince counts a caller's requests sent from t and answered.
func AnsweredSince(r callers.Record, t time.Time) int {
	n := 0
	for _, q := range r.Requests {
		if q.Result == callers.Success && !q.At.Before(t) {
			n++
		}
	}
	return n
}
