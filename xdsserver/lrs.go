package xdsserver

import (
	"context"
	"errors"
	"io"
	"math"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// Defaults of load reporting.
const (
	// DefaultLoadReportInterval is how often subscribers are asked to
	// report loads: often enough for the outcome window (30 s by
	// default), rarely enough that 60,000 subscribers send 6,000
	// reports a second, not 60,000 (../shared/research/xds.md).
	DefaultLoadReportInterval = 10 * time.Second
	// outcomeFlush is how often the outcomes taken from load reports are
	// handed on, merged per caller and endpoint.
	outcomeFlush = time.Second
	// maxCalls bounds one endpoint's counts in one flush (wire's limit).
	maxCalls = 1_000_000_000
)

// lrsServer serves the Load Reporting Service: what a subscriber saw of
// the endpoints it was sent becomes caller-observed outcome evidence
// (SPEC §2), attributed to the subscriber.
type lrsServer struct {
	lrsv3.UnimplementedLoadReportingServiceServer
	s *Server
}

// StreamLoadStats serves one LRS stream: it asks for every cluster's
// loads, per endpoint where the client can (Envoy with endpoint
// granularity; grpc-go reports per locality only), at the configured
// interval, and takes each report.
func (l *lrsServer) StreamLoadStats(stream grpc.BidiStreamingServer[lrsv3.LoadStatsRequest, lrsv3.LoadStatsResponse]) error {
	s := l.s
	allow, name, err := s.authorize(stream.Context())
	if err != nil {
		return err
	}
	release, err := s.claim(stream.Context(), name)
	if err != nil {
		return err
	}
	defer release()
	observer := ""
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || grpcstatus.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		if observer == "" {
			observer = observerOf(name)
			if err := stream.Send(&lrsv3.LoadStatsResponse{SendAllClusters: true, ReportEndpointGranularity: true,
				LoadReportingInterval: durationpb.New(s.cfg.LoadReportInterval)}); err != nil {
				return err
			}
		}
		for _, cs := range req.ClusterStats {
			s.takeLoad(observer, allow, cs)
		}
	}
}

// observerOf names the caller behind a load report: with ACLs on, its
// token's identity, so that one token, however many node ids it claims,
// is one voice in the outcome quorum (and the same voice as that token's
// POST /v1/outcomes: wire.Caller); with them off, "xds:anonymous" for
// every stream, as every API caller is "anonymous" then: a node id is
// whatever the client says, and one client restarting under fresh ids,
// or sending many, would otherwise make a quorum of one
// (docs/decisions.md, "With ACLs off, callers are one").
func observerOf(tokenName string) string {
	if tokenName != "" {
		return "xds:" + tokenName
	}
	return "xds:" + acl.AnonymousName
}

// takeLoad attributes one cluster's load stats to its endpoints, as the
// current table has them, and adds them to what the next flush hands on.
// Per-endpoint stats are attributed by address; a locality's totals only
// when the locality holds exactly one of the cluster's endpoints in
// rotation (a locality's errors spread over several endpoints would
// blame the healthy with the sick). The rest is counted, not taken.
func (s *Server) takeLoad(observer string, allow allowFunc, cs *endpointv3.ClusterStats) {
	svcName, ns, port, ok := parseClusterName(cs.GetClusterName())
	if !ok || !allow.service(ns, svcName) {
		s.m.loads.WithLabelValues("unknown_cluster").Inc()
		return
	}
	t := s.cfg.Table.Acquire()
	if t == nil {
		return
	}
	defer t.Release()
	cands := s.candidates(t, ns, svcName, port)
	if cands == nil {
		s.m.loads.WithLabelValues("unknown_cluster").Inc()
		return
	}
	var out []wire.EndpointOutcome
	take := func(c *candidate, ok, failed uint64) {
		if ok == 0 && failed == 0 { // not ok+failed: a sum of huge counts wraps to 0
			return
		}
		out = append(out, wire.EndpointOutcome{Namespace: ns, Service: svcName, Instance: c.id, Incarnation: c.inc,
			Success: int(min(ok, maxCalls)), Failure: int(min(failed, maxCalls))})
	}
	for _, ls := range cs.UpstreamLocalityStats {
		if len(ls.UpstreamEndpointStats) > 0 {
			for _, es := range ls.UpstreamEndpointStats {
				sa := es.GetAddress().GetSocketAddress()
				a, err := netip.ParseAddr(sa.GetAddress())
				port := sa.GetPortValue()
				c := cands.byAddr[netip.AddrPortFrom(a.Unmap(), uint16(port))]
				// A port past 65535 is no endpoint's (not its low 16 bits').
				if err != nil || c == nil || port > math.MaxUint16 {
					s.m.loads.WithLabelValues("unattributed").Inc()
					continue
				}
				take(c, es.TotalSuccessfulRequests, es.TotalErrorRequests)
				s.m.loads.WithLabelValues("endpoint").Inc()
			}
			continue
		}
		c := cands.alone[place{region: ls.GetLocality().GetRegion(), zone: ls.GetLocality().GetZone()}]
		if c == nil {
			s.m.loads.WithLabelValues("unattributed").Inc()
			continue
		}
		take(c, ls.TotalSuccessfulRequests, ls.TotalErrorRequests)
		s.m.loads.WithLabelValues("locality").Inc()
	}
	if len(out) > 0 {
		s.outcomes.add(observer, out)
	}
}

// parseClusterName splits "<svc>.<ns>:<port>" (labels hold no dots or
// colons).
func parseClusterName(name string) (svc, ns, port string, ok bool) {
	host, port, ok := strings.Cut(name, ":")
	if !ok {
		return "", "", "", false
	}
	svc, ns, ok = strings.Cut(host, ".")
	return svc, ns, port, ok && svc != "" && ns != "" && port != "" && !strings.Contains(ns, ".")
}

// candidate is an instance a load report may be about.
type candidate struct {
	id  string
	inc uint64
}

// candidates is a cluster's instances as one table has them: by address
// and port, and the one in rotation of each locality that has exactly
// one.
type candidates struct {
	byAddr map[netip.AddrPort]*candidate
	alone  map[place]*candidate
}

// candidates returns the instances of ns/svc's port in t, or nil when
// there is no such service.
func (s *Server) candidates(t *status.Table, ns, svcName, port string) *candidates {
	dir := t.Directory()
	id, ok := s.serviceIDs.of(t, ns, svcName)
	if !ok {
		return nil
	}
	out := &candidates{byAddr: map[netip.AddrPort]*candidate{}, alone: map[place]*candidate{}}
	inRotation := map[place]int{}
	for _, slot := range t.Members(id) {
		e := t.Entry(int(slot))
		in := dir.Instance(int(slot))
		if in == nil || in.Incarnation != e.Incarnation {
			continue
		}
		num, ok := in.Port(port)
		if !ok || num == 0 {
			continue
		}
		c := &candidate{id: in.ID, inc: in.Incarnation}
		for _, a := range in.Addrs {
			out.byAddr[netip.AddrPortFrom(a.Unmap(), num)] = c
		}
		if h, _, _, ok := healthOf(e); ok && h != corev3.HealthStatus_DRAINING {
			p := place{region: t.Locality(e.Region), zone: t.Locality(e.Zone)}
			inRotation[p]++
			out.alone[p] = c
		}
	}
	for p, n := range inRotation {
		if n != 1 {
			delete(out.alone, p)
		}
	}
	return out
}

// serviceIDs finds a service's id by name, with an index made once per
// table.
type serviceIDs struct {
	mu    sync.Mutex
	table uint64
	ids   map[[2]string]uint32
}

func (x *serviceIDs) of(t *status.Table, ns, svc string) (uint32, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ids == nil || x.table != t.Version() {
		x.ids, x.table = map[[2]string]uint32{}, t.Version()
		_ = services(t, func(id uint32, s status.ServiceInfo) error {
			x.ids[[2]string{s.Namespace, s.Name}] = id
			return nil
		})
	}
	id, ok := x.ids[[2]string{ns, svc}]
	return id, ok
}

// outcomeSink merges what load reports said per caller and endpoint,
// until the next flush hands it on.
type outcomeSink struct {
	mu  sync.Mutex
	acc map[string]map[wire.InstanceKey]*wire.EndpointOutcome // by observer
}

func (o *outcomeSink) add(observer string, eps []wire.EndpointOutcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.acc == nil {
		o.acc = map[string]map[wire.InstanceKey]*wire.EndpointOutcome{}
	}
	m := o.acc[observer]
	if m == nil {
		m = map[wire.InstanceKey]*wire.EndpointOutcome{}
		o.acc[observer] = m
	}
	for _, e := range eps {
		k := e.Key()
		cur := m[k]
		switch {
		case cur == nil || cur.Incarnation != e.Incarnation:
			e := e
			m[k] = &e
		default:
			cur.Success = min(cur.Success+e.Success, maxCalls)
			cur.Failure = min(cur.Failure+e.Failure, maxCalls)
		}
	}
}

// take empties the sink into batches of at most wire.MaxOutcomeBatch
// reports of at most wire.MaxOutcomeEndpoints endpoints each.
func (o *outcomeSink) take() []wire.OutcomeBatch {
	o.mu.Lock()
	acc := o.acc
	o.acc = nil
	o.mu.Unlock()
	var out []wire.OutcomeBatch
	var cur wire.OutcomeBatch
	for observer, m := range acc {
		rep := wire.ObservedOutcomes{Observer: observer}
		for _, e := range m {
			rep.Endpoints = append(rep.Endpoints, *e)
			if len(rep.Endpoints) == wire.MaxOutcomeEndpoints {
				cur.Reports = append(cur.Reports, rep)
				rep = wire.ObservedOutcomes{Observer: observer}
			}
			if len(cur.Reports) == wire.MaxOutcomeBatch {
				out, cur = append(out, cur), wire.OutcomeBatch{}
			}
		}
		if len(rep.Endpoints) > 0 {
			cur.Reports = append(cur.Reports, rep)
		}
		if len(cur.Reports) == wire.MaxOutcomeBatch {
			out, cur = append(out, cur), wire.OutcomeBatch{}
		}
	}
	if len(cur.Reports) > 0 {
		out = append(out, cur)
	}
	return out
}

// forwardOutcomes hands what load reports said to Config.Outcomes once
// per outcomeFlush, until ctx ends. A batch the sink refuses is logged,
// counted and dropped: outcomes are perishable, and the next reports come
// within the interval.
func (s *Server) forwardOutcomes(ctx context.Context) {
	t := time.NewTicker(outcomeFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, b := range s.outcomes.take() {
			if err := s.cfg.Outcomes(ctx, b); err != nil {
				s.m.loads.WithLabelValues("not_forwarded").Add(float64(len(b.Reports)))
				s.log.Warn("handing on outcomes from load reports", "reports", len(b.Reports), "err", err)
			}
		}
	}
}
