package scenarios

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/callers"
	"github.com/cairn-sd/cairn/integration/scenarios/fleet"
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
	// Service is the service the callers of a kind call; an Envoy
	// caller's must be an http service.
	Service func(callers.Kind) ServiceSpec
	// DNSServer, if set, is the DNS address a DNS-direct caller of zone
	// z asks (from its zone's subnet all the same); nil: z's server.
	DNSServer func(z string) string
	// Zone, if set, is the zone of caller i (from 0) of each kind; nil:
	// Zones()[i%3].
	Zone func(i int) string
	// FirstToken is the first caller token (Region.CallerToken) the
	// population uses; it uses one per caller from there, and for the
	// Envoy kind one per Envoy (3) instead of one per Envoy caller.
	FirstToken int
}

// Population is a running population of callers and their reporters.
type Population struct {
	Callers []*callers.Caller
	// Reporters[i] reports Callers[i]'s outcomes; nil for an Envoy
	// caller (Envoy reports its loads over LRS itself).
	Reporters []*callers.Reporter
	// Zones[i] is Callers[i]'s zone; Tokens[i] its caller token ("" for
	// an Envoy caller: its Envoy's token is the voice).
	Zones, Tokens []string
	// Envoys are the Envoy sidecars of the Envoy callers, by zone, and
	// EnvoyHosts what each holds for the callers' cluster, read once
	// for all of them.
	Envoys     map[string]*integration.Envoy
	EnvoyHosts map[string]*EnvoyHosts
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
// of a kind in zone cfg.Zone(i) (default Zones()[i%3]): a DNS-direct
// caller asks its zone's server from an address of the zone's subnet, a
// DNS-agent caller its zone's agent, a grpc-go caller streams from its
// zone's server with the zone as its node locality, an Envoy caller
// sends through its zone's Envoy. Each has a caller token of its own and
// a Reporter of its outcomes (an Envoy reports over LRS with its own
// token); they run until Stop or t's end. Their requests to the
// instances of a region's NetlabZone leave from CallerSource
// (Region.SourceFor).
//
// With callers of kind Envoy it starts one real Envoy per zone, from
// the shipped bootstrap: ADS from the zone's server, node locality
// RegionName/zone, its listener routing to the Envoy callers' service;
// it skips t if there is no Envoy (integration.Missing: fails under
// CI=true).
func StartPopulation(t *testing.T, r *Region, cfg PopulationConfig) *Population {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	p := &Population{}
	tok := cfg.FirstToken
	for _, k := range cfg.Kinds {
		svc := cfg.Service(k)
		if k == callers.Envoy {
			p.Envoys = startEnvoys(t, r, svc, &tok)
			p.EnvoyHosts = map[string]*EnvoyHosts{}
			for z, e := range p.Envoys {
				p.EnvoyHosts[z] = &EnvoyHosts{Envoy: e, Cluster: EnvoyCluster(svc)}
			}
		}
		for i := range cfg.Per {
			z := Zones()[i%len(Zones())]
			if cfg.Zone != nil {
				z = cfg.Zone(i)
			}
			node := r.Node(z)
			ccfg := callers.Config{Name: fmt.Sprintf("%s-%d", k, i), Rate: cfg.Rate, Timeout: cfg.Timeout, SourceFor: r.SourceFor()}
			dns := callers.DNSConfig{Config: ccfg, Server: node.DNSAddr, Query: svc.Name + "." + Namespace + ".svc.cairn.internal.",
				Port: svc.Port, Protocol: callers.HTTP, Source: net.ParseIP(fmt.Sprintf("127.%d.200.%d", ZoneOctet(z), tok%250+1))}
			var cl *callers.Caller
			var err error
			switch k {
			case callers.DNSDirect:
				if cfg.DNSServer != nil {
					dns.Server = cfg.DNSServer(z)
				}
				cl, err = callers.NewDNS(k, dns)
			case callers.DNSAgent:
				dns.Server = r.Agent(z).DNSAddr
				cl, err = callers.NewDNS(k, dns)
			case callers.GRPCXDS:
				var boot []byte
				boot, err = xdsserver.Bootstrap(xdsserver.BootstrapConfig{Server: node.GRPCAddr, NodeID: ccfg.Name, Region: RegionName, Zone: z})
				if err == nil {
					cl, err = callers.NewGRPC(callers.GRPCConfig{Config: ccfg, Bootstrap: boot, Target: svc.Name + "." + Namespace, Token: r.CallerToken(tok)})
				}
			case callers.Envoy:
				e, hosts := p.Envoys[z], p.EnvoyHosts[z]
				cl, err = callers.NewEnvoy(callers.EnvoyConfig{Config: ccfg, URL: "http://" + e.Listener + "/",
					Hosts: func(ctx context.Context) ([]string, error) {
						hs, err := hosts.Get(ctx)
						return integration.RoutedAddrs(hs), err
					}})
			default:
				err = fmt.Errorf("scenarios: no population of kind %s yet", k)
			}
			if err != nil {
				t.Fatal(err)
			}
			if k == callers.Envoy {
				p.Callers, p.Reporters = append(p.Callers, cl), append(p.Reporters, nil)
				p.Zones, p.Tokens = append(p.Zones, z), append(p.Tokens, "")
				continue
			}
			api, err := client.New(node.URL(), r.CallerToken(tok))
			if err != nil {
				t.Fatal(err)
			}
			p.Zones, p.Tokens = append(p.Zones, z), append(p.Tokens, r.CallerToken(tok))
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
		if rep != nil {
			wg.Go(func() { _ = rep.Run(ctx) })
		}
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

// EnvoyCluster is the cluster cairn serves for svc's port: what an
// Envoy's listener routes to.
func EnvoyCluster(svc ServiceSpec) string { return svc.Name + "." + Namespace + ":main" }

// startEnvoys starts an Envoy per zone for the http service svc, each
// with the next caller token from *tok, and returns them by zone; they
// are killed when t ends.
func startEnvoys(t *testing.T, r *Region, svc ServiceSpec, tok *int) map[string]*integration.Envoy {
	t.Helper()
	bin, err := integration.EnvoyBinary()
	if err != nil {
		integration.Missing(t, "Envoy callers", err.Error())
	}
	if svc.Kind != fleet.KindHTTP {
		t.Fatalf("scenarios: Envoy callers call an http service; %s is %s", svc.Key(), svc.Kind)
	}
	out := map[string]*integration.Envoy{}
	for _, z := range Zones() {
		out[z] = integration.StartEnvoy(t, integration.EnvoyConfig{Dir: filepath.Join(t.TempDir(), "envoy-"+z), Bin: bin,
			Servers: []string{r.Node(z).GRPCAddr}, Node: "envoy-" + z, Region: RegionName, Zone: z,
			Cluster: EnvoyCluster(svc), Token: r.CallerToken(*tok)})
		*tok++
	}
	return out
}

// EnvoyHosts reads what one Envoy holds for a cluster for every caller
// that asks within hostsFresh of the last read: Envoy's /clusters
// lists every host of every cluster (2,000 at full size), too much to
// read for each of its callers five times a second.
type EnvoyHosts struct {
	Envoy   *integration.Envoy
	Cluster string

	mu    sync.Mutex // held through a read: callers wait for it and share it
	at    time.Time
	hosts []integration.EnvoyHost
	err   error
}

// hostsFresh is how long one read of an Envoy's hosts serves.
const hostsFresh = 150 * time.Millisecond

// Get returns the hosts the Envoy holds for the cluster, read at most
// hostsFresh ago. The slice must not be modified.
func (h *EnvoyHosts) Get(ctx context.Context) ([]integration.EnvoyHost, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.at) < hostsFresh {
		return h.hosts, h.err
	}
	h.hosts, h.err = h.Envoy.Hosts(ctx, h.Cluster)
	h.at = time.Now()
	return h.hosts, h.err
}

// WaitSteady polls until every caller has had an answer, then until
// each has had nine tenths of steady's worth of requests (at rate a
// second) answered since; it returns when the steady traffic began (the
// first poll at which every caller had answers), or an error past
// steady and slack.
func (p *Population) WaitSteady(rate float64, steady, slack time.Duration) (time.Time, error) {
	var from time.Time
	want := int(rate * steady.Seconds() * 9 / 10)
	err := integration.Poll(steady+slack, 200*time.Millisecond, func() error {
		for _, rec := range p.Snap() {
			if from.IsZero() && !Answered(rec) {
				return fmt.Errorf("%s has had no answer yet", rec.Caller)
			}
		}
		if from.IsZero() {
			from = time.Now()
		}
		for _, rec := range p.Snap() {
			if n := AnsweredSince(rec, from); n < want {
				return fmt.Errorf("%s: %d requests answered in steady traffic, want %d", rec.Caller, n, want)
			}
		}
		return nil
	})
	return from, err
}

// CalledServices returns the services synthetic callers call: the first
// http and the first grpc service registered through the Go client
// (their instances in every zone, each with an active check).
func (r *Region) CalledServices() (httpSvc, grpcSvc ServiceSpec) {
	for _, s := range r.Services {
		switch {
		case s.Registrar != ByClient:
		case s.Kind == fleet.KindHTTP && httpSvc.Name == "":
			httpSvc = s
		case s.Kind == fleet.KindGRPC && grpcSvc.Name == "":
			grpcSvc = s
		}
	}
	return httpSvc, grpcSvc
}

// ServiceOf returns, for callers of kind k, the service they call: grpc
// for grpc-go, http for the others.
func ServiceOf(httpSvc, grpcSvc ServiceSpec) func(callers.Kind) ServiceSpec {
	return func(k callers.Kind) ServiceSpec {
		if k == callers.GRPCXDS {
			return grpcSvc
		}
		return httpSvc
	}
}
