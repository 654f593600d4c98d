package scenarios

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/cairn-sd/cairn/bench/xdssub"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// AssignmentName is the xDS name of service s's assignment (its one
// port, "main"): the cluster name `<svc>.<ns>:<port>` of SPEC §4.
func AssignmentName(s ServiceSpec) string { return s.Name + "." + Namespace + ":main" }

// SubscribersConfig is a population of delta xDS subscribers on a
// region (bench/xdssub, the xDS bench's load generator's subscriber):
// subscriber i is in zone Zones()[i%3], declares that locality as its
// node's and streams from its zone's server, watching Watch of Services
// chosen at random.
type SubscribersConfig[T any] struct {
	Count, Watch int
	// Services are those watched from (default: every service of the
	// region).
	Services []ServiceSpec
	// Token is the subscribers' token (default: the region's last
	// caller token, Region.CallerToken).
	Token string
	// Seed picks the services each subscriber watches.
	Seed uint64
	// Decode turns an assignment into what Received is given; it runs
	// once per name and version over the whole population
	// (xdstest.Decoder).
	Decode func(*endpointv3.ClusterLoadAssignment) (T, error)
	// Prepare, if set, is called for each subscriber before its stream
	// starts.
	Prepare func(s *Subscriber)
	// Received, if set, is called from a subscriber's goroutine for
	// every assignment it is sent of a service it watches (wi: the
	// service's index in Subscriber.Services), when its Recv returned.
	Received func(s *Subscriber, wi int, a T, at time.Time)
	// Opened, Closed and Refused, if set, are called from a subscriber's
	// goroutine as xdssub.Subscriber's hooks are: a stream answered,
	// with the versions the subscriber named when it asked
	// (initial_resource_versions; nil the first time); an answered
	// stream ended; an attempt that failed before its first answer.
	Opened  func(s *Subscriber, sess *xdssub.Session, held map[string]string)
	Closed  func(s *Subscriber, err error)
	Refused func(s *Subscriber, err error)
	// Sent, if set, is called from a subscriber's goroutine for every
	// response, before Received, with the resources it sent older (by
	// store revision) than the versions held and the names it removed
	// (xdssub.View).
	Sent func(s *Subscriber, resp *discoveryv3.DeltaDiscoveryResponse, regressed []xdssub.Regression, removed []string, at time.Time)
}

// Subscriber is one delta subscriber of a population.
type Subscriber struct {
	ID   int
	Zone string
	// Services are those it watches, Names their assignments'.
	Services []ServiceSpec
	Names    []string
	sub      *xdssub.Subscriber
	// Only the subscriber's goroutine writes these until Stop.
	opens, regressions, removed, undecodable int
}

// Subscribers is a running population.
type Subscribers[T any] struct {
	Subs []*Subscriber
	// Watchers counts the subscribers watching each service, by name.
	Watchers map[string]int
	// PerZone counts the subscribers of each zone.
	PerZone   map[string]int
	connected atomic.Int64
	conns     []*grpc.ClientConn
	stop      context.CancelFunc
	wg        sync.WaitGroup
	stopOnce  sync.Once
}

// StartSubscribers starts cfg's population on r; it runs until Stop or
// the end of t.
func StartSubscribers[T any](t testing.TB, r *Region, cfg SubscribersConfig[T]) *Subscribers[T] {
	t.Helper()
	svcs := cfg.Services
	if len(svcs) == 0 {
		svcs = r.Services
	}
	if cfg.Count < 1 || cfg.Watch < 1 || cfg.Watch > len(svcs) || cfg.Decode == nil {
		t.Fatalf("scenarios: SubscribersConfig: Count %d and Watch %d must be positive, Watch at most %d (the services), and Decode set",
			cfg.Count, cfg.Watch, len(svcs))
	}
	if cfg.Token == "" {
		cfg.Token = r.CallerToken(r.Callers - 1)
	}
	dec := xdstest.NewDecoder(func(rs *discoveryv3.Resource) (T, error) {
		cla, err := xdstest.DecodeAssignment(rs)
		if err != nil {
			var zero T
			return zero, err
		}
		return cfg.Decode(cla)
	})
	ctx, cancel := context.WithCancel(context.Background())
	p := &Subscribers[T]{Watchers: map[string]int{}, PerZone: map[string]int{}, stop: cancel}
	t.Cleanup(p.Stop)
	// At most 200 streams a connection, as a fleet of sidecars spreads
	// them; each zone's over its server.
	byZone := map[string][]*grpc.ClientConn{}
	for i := range cfg.Count {
		p.PerZone[Zones()[i%len(Zones())]]++
	}
	for _, z := range Zones() {
		for range (p.PerZone[z] + 199) / 200 {
			cc, err := xdstest.Dial(r.Node(z).GRPCAddr)
			if err != nil {
				t.Fatal(err)
			}
			p.conns = append(p.conns, cc)
			byZone[z] = append(byZone[z], cc)
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 4))
	for i := range cfg.Count {
		z := Zones()[i%len(Zones())]
		s := &Subscriber{ID: i, Zone: z}
		index := map[string]int{}
		for _, k := range rng.Perm(len(svcs))[:cfg.Watch] {
			index[AssignmentName(svcs[k])] = len(s.Services)
			s.Services = append(s.Services, svcs[k])
			s.Names = append(s.Names, AssignmentName(svcs[k]))
			p.Watchers[AssignmentName(svcs[k])]++
		}
		s.sub = &xdssub.Subscriber{
			Request: xdssub.Request{Node: &corev3.Node{Id: fmt.Sprintf("sub-%d", i), Locality: &corev3.Locality{Region: RegionName, Zone: z}},
				Token: cfg.Token, Type: resourcev3.EndpointType, Names: s.Names},
			Retry: xdssub.Retry{Min: 250 * time.Millisecond, Max: 5 * time.Second},
			Rand:  rand.New(rand.NewPCG(uint64(i), 9)),
		}
		s.sub.Opened = func(sess *xdssub.Session, held map[string]string) {
			s.opens++
			p.connected.Add(1)
			if cfg.Opened != nil {
				cfg.Opened(s, sess, held)
			}
		}
		s.sub.Closed = func(err error) {
			p.connected.Add(-1)
			if cfg.Closed != nil {
				cfg.Closed(s, err)
			}
		}
		if cfg.Refused != nil {
			s.sub.Refused = func(err error) { cfg.Refused(s, err) }
		}
		s.sub.Received = func(resp *discoveryv3.DeltaDiscoveryResponse, reg []xdssub.Regression, removed []string) {
			at := time.Now()
			if cfg.Sent != nil {
				cfg.Sent(s, resp, reg, removed, at)
			}
			s.regressions += len(reg)
			s.removed += len(removed)
			for _, rs := range resp.Resources {
				wi, ok := index[rs.Name]
				if !ok {
					continue
				}
				a, err := dec.Decode(rs)
				if err != nil {
					s.undecodable++
					continue
				}
				if cfg.Received != nil {
					cfg.Received(s, wi, a, at)
				}
			}
		}
		ccs := byZone[z]
		cc := ccs[(i/len(Zones()))%len(ccs)]
		p.Subs = append(p.Subs, s)
		if cfg.Prepare != nil {
			cfg.Prepare(s)
		}
		p.wg.Go(func() { s.sub.Run(ctx, cc) })
	}
	return p
}

// Connected returns how many subscribers have a stream open.
func (p *Subscribers[T]) Connected() int { return int(p.connected.Load()) }

// WaitConnected waits until every subscriber has a stream, at most
// timeout.
func (p *Subscribers[T]) WaitConnected(timeout time.Duration) error {
	return integration.Poll(timeout, 100*time.Millisecond, func() error {
		if n := p.Connected(); n < len(p.Subs) {
			return fmt.Errorf("%d of %d subscribers connected", n, len(p.Subs))
		}
		return nil
	})
}

// Stop ends every stream and waits for the subscribers; their counts
// are safe to read after it.
func (p *Subscribers[T]) Stop() {
	p.stopOnce.Do(func() {
		p.stop()
		p.wg.Wait()
		for _, cc := range p.conns {
			cc.Close()
		}
	})
}

// SubscriberCounts is what the population saw of its streams, summed.
type SubscriberCounts struct {
	// Opens counts the streams answered (a subscriber's first included),
	// Regressions the resources sent older than the version held
	// (xdssub.View), Removed the assignments removed, Undecodable those
	// Decode refused.
	Opens, Regressions, Removed, Undecodable int
}

// Counts sums the subscribers' counts; call it after Stop.
func (p *Subscribers[T]) Counts() SubscriberCounts {
	var c SubscriberCounts
	for _, s := range p.Subs {
		c.Opens += s.opens
		c.Regressions += s.regressions
		c.Removed += s.removed
		c.Undecodable += s.undecodable
	}
	return c
}
