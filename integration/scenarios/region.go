package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/scenarios/fleet"
	"github.com/cairn-sd/cairn/status"
)

// The region's geography: one region, three zones, each with a server,
// an agent and a /16 of loopback for its instances and callers (the
// servers' --subnet places an address of 127.Z.0.0/16 in its zone).
const (
	RegionName = "r1"
	// Namespace holds every service of the region.
	Namespace = "sim"
	// BasePort is the port of the first service; service i listens on
	// BasePort+i on every instance's address.
	BasePort = 12000
)

// Zones returns the region's zones, in order: server n(i+1) and the
// i-th agent are in Zones()[i].
func Zones() []string { return []string{"a", "b", "c"} }

// ZoneOctet is the second byte of the addresses of zone z: 11, 12, 13.
func ZoneOctet(z string) int { return 11 + slices.Index(Zones(), z) }

// ZoneSubnet is zone z's /16.
func ZoneSubnet(z string) string { return fmt.Sprintf("127.%d.0.0/16", ZoneOctet(z)) }

// ZoneAddr is the i-th address (from 0) of zone z: 127.Z.H.L, with L
// from 1 to 254 (never .0 or .255).
func ZoneAddr(z string, i int) string {
	return fmt.Sprintf("127.%d.%d.%d", ZoneOctet(z), i/254, i%254+1)
}

// Registrars of an instance: who registered it.
const (
	ByClient     = "client"      // the Go client, lease of the policy (1h)
	ByCLI        = "cli"         // cairn register --lease-ttl, renewed by cairn renew
	ByThirdParty = "third-party" // readiness none: no check, no renewal
)

// Config sizes a region.
type Config struct {
	// Services is the number of services, the leased and the
	// third-party one among them; at least 3.
	Services int
	// Instances is the number of instances over every service.
	Instances int
	// CLIInstances is the leased service's share of Instances,
	// registered through the CLI.
	CLIInstances int
	// LeaseTTL is the leased instances' --lease-ttl; they are renewed
	// every third of it.
	LeaseTTL time.Duration
	// CheckInterval is the active checks' interval (timeout: 2 s, or
	// less than the interval).
	CheckInterval time.Duration
	// Agents runs one cairn agent per zone.
	Agents bool
	// ServerArgs are extra `cairn server` flags.
	ServerArgs []string
	// Callers is the number of synthetic callers' tokens (CallerToken):
	// the servers run with ACLs, one reader token per caller.
	Callers int
	// NetlabZone, if set, puts that zone's instances behind a network
	// the scenario can cut (netzone.go): in a fleet process of their
	// own inside a netlab namespace, on addresses of NetlabSubnet. It
	// needs root (the scenario skips without, except under CI=true)
	// and holds netlab's lock while the region runs.
	NetlabZone string
}

// ShortConfig is the region of make test: 8 services, 200 instances.
func ShortConfig() Config {
	return Config{Services: 8, Instances: 200, CLIInstances: 12, LeaseTTL: 15 * time.Second,
		CheckInterval: 2 * time.Second, Agents: true, Callers: 16}
}

// FullConfig is the seed's region: 40 services, 2,000 instances.
func FullConfig() Config {
	return Config{Services: 40, Instances: 2000, CLIInstances: 50, LeaseTTL: time.Minute,
		CheckInterval: 5 * time.Second, Agents: true, Callers: 64}
}

// SizeConfig is FullConfig under CAIRN_SCENARIOS=full, ShortConfig
// otherwise.
func SizeConfig() Config {
	if Full() {
		return FullConfig()
	}
	return ShortConfig()
}

// ServiceSpec is one service of the region: its definition's parts and
// the kind of its instances.
type ServiceSpec struct {
	Name string
	// Kind is the fleet kind of its instances: http, grpc or tcp.
	Kind string
	Port int
	// Readiness is the capability's readiness: "" (probe) or "none".
	Readiness string
	// Check and Policy are YAML flow mappings; an empty Check: none.
	Check, Policy string
	// Registrar registers its instances (ByClient, ByCLI, ByThirdParty).
	Registrar string
	// Count is its number of instances.
	Count int
}

// Key is "ns/svc".
func (s ServiceSpec) Key() string { return Namespace + "/" + s.Name }

// YAML is the service's definition, one document.
func (s ServiceSpec) YAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "namespace: %s\nname: %s\nports: [{name: main, number: %d, protocol: tcp}]\n", Namespace, s.Name, s.Port)
	if s.Readiness != "" {
		fmt.Fprintf(&b, "capability: {readiness: %s}\n", s.Readiness)
	}
	if s.Check != "" {
		fmt.Fprintf(&b, "check: %s\n", s.Check)
	}
	if s.Policy != "" {
		fmt.Fprintf(&b, "policy: %s\n", s.Policy)
	}
	return b.String()
}

// Instance is one instance of the region's table.
type Instance struct {
	fleet.Instance
	// Name is its service's name (Service is "ns/svc").
	Name      string
	Registrar string
	// Incarnation is the one its registration was given.
	Incarnation uint64
}

// Check returns the check of a service whose instances are of kind,
// probed every interval: GET /ready, a gRPC Health Check, or a TCP
// connect.
func Check(kind string, interval time.Duration) string {
	timeout := min(2*time.Second, interval/2)
	switch kind {
	case fleet.KindHTTP:
		return fmt.Sprintf("{type: http, port: main, path: /ready, interval: %s, timeout: %s}", interval, timeout)
	case fleet.KindGRPC:
		return fmt.Sprintf("{type: grpc, port: main, interval: %s, timeout: %s}", interval, timeout)
	}
	return fmt.Sprintf("{type: tcp, port: main, interval: %s, timeout: %s}", interval, timeout)
}

// plan lays the region out: service 0 is "leased" (through the CLI),
// the last "third-party" (readiness none, one instance), the others
// svc-NN of kinds http, grpc, http, tcp in turn (half of them http), sharing
// the rest of the instances; instance j of a service is in zone
// Zones()[j%3].
func plan(cfg Config) ([]ServiceSpec, []Instance, error) {
	if cfg.Services < 3 {
		return nil, nil, fmt.Errorf("scenarios: Config.Services: %d; a region needs at least 3", cfg.Services)
	}
	if cfg.Callers < 0 {
		return nil, nil, fmt.Errorf("scenarios: Config.Callers: %d; must not be negative", cfg.Callers)
	}
	if err := cfg.checkNetlabZone(); err != nil {
		return nil, nil, err
	}
	if cfg.LeaseTTL <= 0 || cfg.CheckInterval <= 0 {
		return nil, nil, fmt.Errorf("scenarios: Config.LeaseTTL (%s) and Config.CheckInterval (%s) must be positive", cfg.LeaseTTL, cfg.CheckInterval)
	}
	rest := cfg.Instances - cfg.CLIInstances - 1
	if cfg.CLIInstances < 1 || rest < cfg.Services-2 {
		return nil, nil, fmt.Errorf("scenarios: Config.Instances: %d (%d through the CLI) leaves fewer than one per service", cfg.Instances, cfg.CLIInstances)
	}
	policy := "{lease_ttl: 1h, slow_start: 0s}"
	var svcs []ServiceSpec
	for i := range cfg.Services {
		s := ServiceSpec{Name: fmt.Sprintf("svc-%02d", i), Kind: []string{fleet.KindHTTP, fleet.KindGRPC, fleet.KindHTTP, fleet.KindTCP}[i%4],
			Port: BasePort + i, Policy: policy, Registrar: ByClient}
		switch i {
		case 0:
			s.Name, s.Kind, s.Registrar, s.Count = "leased", fleet.KindHTTP, ByCLI, cfg.CLIInstances
		case cfg.Services - 1:
			s.Name, s.Kind, s.Registrar, s.Count, s.Readiness = "third-party", fleet.KindTCP, ByThirdParty, 1, "none"
		default:
			n := cfg.Services - 2
			s.Count = rest / n
			if i-1 < rest%n {
				s.Count++
			}
		}
		if s.Readiness == "" {
			s.Check = Check(s.Kind, cfg.CheckInterval)
		}
		svcs = append(svcs, s)
	}
	next := map[string]int{}
	var insts []Instance
	for _, s := range svcs {
		for j := range s.Count {
			z := Zones()[j%len(Zones())]
			if s.Registrar == ByThirdParty {
				z = Zones()[len(Zones())-1]
			}
			addr := cfg.zoneAddr(z, next[z])
			next[z]++
			insts = append(insts, Instance{Name: s.Name, Registrar: s.Registrar, Instance: fleet.Instance{
				ID: fmt.Sprintf("%s-%s-%d", s.Name, z, j), Service: s.Key(), Zone: z, Kind: s.Kind, Addr: addr, Port: s.Port}})
		}
	}
	return svcs, insts, nil
}

// Region is a simulated region: three servers (one per zone), the
// fleet process with every instance, the services applied and the
// instances registered, an agent per zone, and the leased instances'
// renewal loop. Scenarios add their faults and callers on top.
type Region struct {
	Config
	// Cluster is the servers; Cluster.Nodes[i] is in Zones()[i].
	Cluster *integration.Cluster
	// Agents are the agents, Agents[i] in Zones()[i]; nil without
	// Config.Agents.
	Agents []*integration.Agent
	// Fleet is the fleet process and its control API: every instance
	// but those of the NetlabZone, which are ZoneFleet's.
	Fleet, ZoneFleet *FleetProcess
	// Services are the services, as applied at the start.
	Services []ServiceSpec
	// Timing of the start: how long each part took.
	StartTimes StartTimes

	mu        sync.Mutex
	instances []Instance
	byID      map[string]int
	renew     renewLoop
	t         testing.TB
	dir       string
	net       *netZone // with a NetlabZone
}

// StartTimes is how long the region took to come up, by part.
type StartTimes struct {
	Servers, Fleet, Apply, Register, Settle, Agents, Total time.Duration
}

// String is one line for a scenario's note.
func (s StartTimes) String() string {
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return fmt.Sprintf("region up in %s (servers %s, fleet %s, apply %s, register %s, settle %s, agents %s)",
		r(s.Total), r(s.Servers), r(s.Fleet), r(s.Apply), r(s.Register), r(s.Settle), r(s.Agents))
}

// NewRegion lays out the region cfg describes; Start starts it.
func NewRegion(cfg Config) (*Region, error) {
	svcs, insts, err := plan(cfg)
	if err != nil {
		return nil, err
	}
	r := &Region{Config: cfg, Services: svcs, instances: insts, byID: map[string]int{}}
	for i, in := range insts {
		r.byID[in.ID] = i
	}
	return r, nil
}

// StartRegion starts the region cfg describes for t and closes it when t
// ends. It skips under -short (except under CI=true).
func StartRegion(t testing.TB, cfg Config) *Region {
	t.Helper()
	integration.NeedProcesses(t)
	r, err := NewRegion(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.Start(t)
	return r
}

// Node returns the server of zone z.
func (r *Region) Node(z string) *integration.Node { return r.Cluster.Nodes[slices.Index(Zones(), z)] }

// Nodes returns the servers, in zone order.
func (r *Region) Nodes() []*integration.Node { return r.Cluster.Nodes }

// Agent returns the agent of zone z, or nil.
func (r *Region) Agent(z string) *integration.Agent {
	if i := slices.Index(Zones(), z); i >= 0 && i < len(r.Agents) {
		return r.Agents[i]
	}
	return nil
}

// Service returns the service named name.
func (r *Region) Service(name string) (ServiceSpec, bool) {
	for _, s := range r.Services {
		if s.Name == name {
			return s, true
		}
	}
	return ServiceSpec{}, false
}

// Instances returns the table of instances, with the incarnation each
// was registered with.
func (r *Region) Instances() []Instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.instances)
}

// InstancesOf returns the instances of service name.
func (r *Region) InstancesOf(name string) []Instance {
	var out []Instance
	for _, in := range r.Instances() {
		if in.Name == name {
			out = append(out, in)
		}
	}
	return out
}

// Instance returns the instance with id.
func (r *Region) Instance(id string) (Instance, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.byID[id]
	if !ok {
		return Instance{}, false
	}
	return r.instances[i], true
}

// setIncarnation records the incarnation instance id was registered
// with.
func (r *Region) setIncarnation(id string, inc uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.instances[r.byID[id]].Incarnation = inc
}

// RenewFailures returns the number of `cairn renew` runs that failed so
// far, and the last failure.
func (r *Region) RenewFailures() (int, error) { return r.renew.failures() }

// RenewRounds returns the number of rounds of renewals done so far.
func (r *Region) RenewRounds() int { return int(r.renew.rounds.Load()) }

// Start starts the region: the servers and the fleet at once, then the
// services (cairn apply -f), the instances (in parallel through the Go
// client, the leased ones through cairn register), the agents; it
// returns once every server serves every instance eligible and every
// agent holds every service (WaitHealthy waits for the probes' verdicts
// too). It fails t on error; Close runs when t
// ends.
func (r *Region) Start(t testing.TB) {
	t.Helper()
	r.t, r.dir = t, t.TempDir()
	// Registered before anything starts, so it runs after every process
	// has stopped and before the data dirs go.
	t.Cleanup(func() { keepLogs(t, r.dir) })
	if r.NetlabZone != "" {
		r.startNetlab(t)
	}
	start := time.Now()
	type fleetStart struct {
		p, zp *FleetProcess
		err   error
	}
	fleetCh := make(chan fleetStart, 1)
	go func() {
		p, zp, err := r.startFleets()
		r.StartTimes.Fleet = time.Since(start)
		fleetCh <- fleetStart{p, zp, err}
	}()
	var fs *fleetStart
	awaitFleet := func() fleetStart {
		if fs == nil {
			v := <-fleetCh
			fs = &v
		}
		return *fs
	}
	// Should the servers fail to start, the fleet stops all the same.
	t.Cleanup(func() {
		f := awaitFleet()
		for _, p := range []*FleetProcess{f.p, f.zp} {
			if p != nil {
				p.Close()
			}
		}
	})
	args, err := writeACL(r.dir, r.Callers)
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, "--allow-loopback-endpoints")
	for _, z := range Zones() {
		args = append(args, "--subnet", ZoneSubnet(z)+"="+RegionName+"/"+z)
	}
	args = append(args, r.netlabSubnetArgs()...)
	r.Cluster = integration.StartClusterWith(t, integration.Config{
		Nodes: len(Zones()), Args: append(args, r.ServerArgs...), Token: AdminToken,
		NodeArgs: func(i int) []string { return append(serverArgs(i), debugArgs(i)...) },
	})
	r.StartTimes.Servers = time.Since(start)
	f := awaitFleet()
	if f.err != nil {
		t.Fatal(f.err)
	}
	r.Fleet, r.ZoneFleet = f.p, f.zp
	// Before the servers stop: the renewals end first.
	t.Cleanup(r.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	if err := r.Apply(ctx, r.Services...); err != nil {
		t.Fatal(err)
	}
	r.StartTimes.Apply = time.Since(began)
	began = time.Now()
	if err := r.registerAll(ctx); err != nil {
		t.Fatal(err)
	}
	r.StartTimes.Register = time.Since(began)
	r.renew.start(r)
	began = time.Now()
	if err := r.WaitServed(ctx, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	r.StartTimes.Settle = time.Since(began)
	began = time.Now()
	if r.Config.Agents {
		r.startAgents(t)
	}
	r.StartTimes.Agents = time.Since(began)
	r.StartTimes.Total = time.Since(start)
	t.Logf("%s", r.StartTimes)
}

// startAgents starts an agent per zone, subscribed to every service,
// and waits until each holds every instance.
func (r *Region) startAgents(t testing.TB) {
	t.Helper()
	var servers []string
	for _, n := range r.Cluster.Nodes {
		servers = append(servers, n.GRPCAddr)
	}
	for _, z := range Zones() {
		args := []string{"--region", RegionName, "--zone", z}
		for _, s := range r.Services {
			args = append(args, "--service", s.Key())
		}
		r.Agents = append(r.Agents, integration.StartAgentWith(t, integration.AgentConfig{
			Servers: servers, Name: "agent-" + z, Token: AgentToken(z), Args: args}))
	}
	for _, a := range r.Agents {
		if err := a.WaitReady(time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	err := integration.Poll(2*time.Minute, 200*time.Millisecond, func() error {
		for i, a := range r.Agents {
			st, err := a.Status(context.Background())
			if err != nil {
				return err
			}
			for _, s := range r.Services {
				v, ok := st.View(s.Name + "." + Namespace)
				if !ok || v.Instances != s.Count {
					return fmt.Errorf("agent of zone %s: view %s %+v; want %d instances", Zones()[i], s.Key(), v, s.Count)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// WaitServed polls until every live server lists every service with all
// its instances, every one eligible.
func (r *Region) WaitServed(ctx context.Context, timeout time.Duration) error {
	want := map[string]int{}
	for _, s := range r.Services {
		want[s.Name] = s.Count
	}
	return integration.Poll(timeout, 250*time.Millisecond, func() error {
		for _, n := range r.Cluster.Live() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ss, err := n.Client().Services(cctx)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", n.ID, err)
			}
			seen := 0
			for _, s := range ss {
				c, ok := want[s.Name]
				if s.Namespace != Namespace || !ok {
					continue
				}
				if s.Instances != c || s.Eligible != c {
					return fmt.Errorf("%s lists %s/%s with %d instances, %d eligible; want %d, all eligible", n.ID, s.Namespace, s.Name, s.Instances, s.Eligible, c)
				}
				seen++
			}
			if seen != len(want) {
				return fmt.Errorf("%s lists %d of the region's %d services", n.ID, seen, len(want))
			}
		}
		return nil
	})
}

// WaitHealthy polls until the leader judges every instance of every
// service with a check healthy: their probes have run and passed, which
// takes longer than being served (a new instance is served, unknown,
// from its registration).
func (r *Region) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return integration.Poll(timeout, 500*time.Millisecond, func() error {
		leader, err := r.Cluster.Leader()
		if err != nil {
			return err
		}
		for _, s := range r.Services {
			if s.Check == "" {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			eps, err := leader.Client().Endpoints(cctx, Namespace, s.Name)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", leader.ID, err)
			}
			healthy := 0
			for _, e := range eps {
				if e.Verdict == status.Healthy && e.Eligible {
					healthy++
				}
			}
			if healthy != s.Count {
				return fmt.Errorf("%s: %s has %d of %d instances healthy", leader.ID, s.Key(), healthy, s.Count)
			}
		}
		return nil
	})
}

// Close stops the renewal loop and the fleet; the servers and agents
// stop with the test.
func (r *Region) Close() {
	r.renew.stop()
	for _, p := range []*FleetProcess{r.Fleet, r.ZoneFleet} {
		if p != nil {
			p.Close()
		}
	}
}
