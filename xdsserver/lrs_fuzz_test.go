package xdsserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/wire"
)

// lrsInstances are the instances of pay.shop (port grpc) the LRS fuzz
// target's table holds: one alone in eu-1a, two in eu-1b.
var lrsInstances = []struct {
	id   string
	addr netip.AddrPort
	zone string // of region eu
}{
	{"pay-0", netip.MustParseAddrPort("10.0.0.1:8443"), "eu-1a"},
	{"pay-1", netip.MustParseAddrPort("10.0.0.2:8443"), "eu-1b"},
	{"pay-2", netip.MustParseAddrPort("10.0.0.3:8443"), "eu-1b"},
}

// Alphabets of the load reports the inputs are made of.
var (
	lrsClusters = []string{"pay.shop:grpc", "vault.bank:grpc", "pay.shop:http", "nobody.shop:grpc", "pay.shop", "",
		":", "pay.shop:grpc:grpc", "a.pay.shop:grpc", ".shop:grpc"}
	lrsLocalities = []*corev3.Locality{nil, {Region: "eu", Zone: "eu-1a"}, {Region: "eu", Zone: "eu-1b"}, {Region: "eu"},
		{Region: "us", Zone: "eu-1a"}, {Region: "eu", Zone: "eu-1a", SubZone: "rack"}}
	lrsAddrs = []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "::ffff:10.0.0.1", "10.9.9.9", "", "not-an-address", "10.0.0.1%eth0"}
	lrsPorts = []uint32{8443, 0, 8443 + 1<<16, 80, math.MaxUint32}
	// Counts, small and past every bound (wire's 10⁹ per flush).
	lrsCounts = []uint64{0, 1, 10, maxCalls - 1, maxCalls, maxCalls + 1, 1 << 63, math.MaxUint64}
	lrsNodes  = []string{"envoy-1", "", "with space", "ünïcode", strings.Repeat("n", 300), "tab\there", "x"}
)

// FuzzLoadReports sends a sequence of load reports decoded from the
// input on one LRS stream to a real server and checks what it makes of
// them: the stream answers the first report with the reporting policy
// and ends as it should; what the server would hand on as caller
// outcomes is valid evidence (wire's rules), names the stream's caller,
// and is exactly what the reports said of the endpoints they can be
// pinned on (per endpoint by address and port, per locality where it
// holds one endpoint), with counts capped and never wrapped.
func FuzzLoadReports(f *testing.F) {
	f.Add([]byte{})
	// ACLs off, node envoy-1; pay.shop:grpc, eu-1a's totals and eu-1b's
	// per endpoint.
	f.Add([]byte{0, 1, 1, 0, 2, 1, 2, 2, 0, 0, 2, 2, 1, 2, 0, 3, 1})
	// ACLs on, the shop reader; counts past the bounds.
	f.Add([]byte{1, 1, 0, 1, 0, 1, 1, 7, 6})
	// Counts whose sum wraps to 0 (math.MaxUint64 successes, 1 error).
	f.Add([]byte{0, 1, 1, 0, 1, 1, 7, 1, 0})
	// Port 8443+65536 of pay-0's address: no endpoint's.
	f.Add([]byte{0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 2, 1, 0})
	// ACLs off, a node id with a space: it names no caller (before the
	// anonymous caller, it named one that wire's rules refuse, and the
	// batch carrying every caller's reports was refused with it).
	f.Add([]byte{0, 5, 1, 0, 1, 1, 1, 0, 0})
	tb := statustest.New(f, 8)
	pub := tb.Publisher
	lrsTable(f, tb)
	on, err := acl.New(acl.Config{Enabled: true, Tokens: []acl.Token{{Secret: "shop-reader-secret-0123456789", Scope: acl.Reader, Namespaces: []string{"shop"}}}})
	if err != nil {
		f.Fatal(err)
	}
	var authz atomic.Pointer[acl.Authorizer] // this input's: nil, ACLs off
	srv, err := New(Config{Table: pub, Logger: slog.New(slog.DiscardHandler), Authorizer: func() *acl.Authorizer { return authz.Load() },
		Outcomes: func(context.Context, wire.OutcomeBatch) error {
			return errors.New("not run: the target takes the outcomes itself")
		}})
	if err != nil {
		f.Fatal(err)
	}
	// Served without Run: the outcomes stay in the server's sink, where
	// each input's are taken and checked once its stream has ended.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go gs.Serve(ln)
	f.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cc.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		in := data
		next := func() byte {
			if len(in) == 0 {
				return 0
			}
			c := in[0]
			in = in[1:]
			return c
		}
		pick := func(n int) int { return int(next()) % n }
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		observer, valid := "", true
		authz.Store(nil)
		switch next() % 4 {
		case 1:
			authz.Store(on)
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer shop-reader-secret-0123456789")
			observer = "xds:reader:" + acl.AccessorOf(acl.DigestOf("shop-reader-secret-0123456789"))
		case 2:
			authz.Store(on)
			valid = false // no token
		}
		stream, err := lrsv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]wire.EndpointOutcome{}
		sent := 0
		for len(in) > 0 && sent < 16 {
			req := &lrsv3.LoadStatsRequest{}
			if b := next(); b&1 == 1 {
				req.Node = &corev3.Node{Id: lrsNodes[int(b>>1)%len(lrsNodes)]}
			}
			for range pick(4) {
				cs := &endpointv3.ClusterStats{ClusterName: lrsClusters[pick(len(lrsClusters))]}
				for range pick(4) {
					ls := &endpointv3.UpstreamLocalityStats{Locality: lrsLocalities[pick(len(lrsLocalities))],
						TotalSuccessfulRequests: lrsCounts[pick(len(lrsCounts))], TotalErrorRequests: lrsCounts[pick(len(lrsCounts))]}
					for range pick(3) {
						ls.UpstreamEndpointStats = append(ls.UpstreamEndpointStats, &endpointv3.UpstreamEndpointStats{
							Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
								Address: lrsAddrs[pick(len(lrsAddrs))], PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: lrsPorts[pick(len(lrsPorts))]}}}},
							TotalSuccessfulRequests: lrsCounts[pick(len(lrsCounts))], TotalErrorRequests: lrsCounts[pick(len(lrsCounts))]})
					}
					cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, ls)
				}
				req.ClusterStats = append(req.ClusterStats, cs)
			}
			if err := stream.Send(req); err != nil {
				break // the stream ended: Recv says how
			}
			if observer == "" {
				observer = "xds:" + acl.AnonymousName // with ACLs off, whatever node id the client names
			}
			sent++
			expectLoads(want, observer, req)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var resps int
		for {
			resp, err := stream.Recv()
			if err != nil {
				if st := grpcstatus.Convert(err); !valid && st.Code() != codes.Unauthenticated || valid && !errors.Is(err, io.EOF) {
					t.Fatalf("the stream ended with %v (token valid: %v)", err, valid)
				}
				break
			}
			resps++
			if resps > 1 || !resp.SendAllClusters || !resp.ReportEndpointGranularity || resp.LoadReportingInterval.AsDuration() != DefaultLoadReportInterval {
				t.Fatalf("response %d: %v; want one, asking for every cluster, per endpoint, every %v", resps, resp, DefaultLoadReportInterval)
			}
		}
		if valid && sent > 0 && resps != 1 {
			t.Fatalf("%d reports answered with %d responses, want 1", sent, resps)
		}
		got := map[string]wire.EndpointOutcome{}
		for _, b := range srv.outcomes.take() {
			if err := b.Validate(); err != nil {
				t.Fatalf("the server would hand on an invalid batch: %v", err)
			}
			for _, r := range b.Reports {
				for _, e := range r.Endpoints {
					k := r.Observer + " " + e.Instance
					if _, dup := got[k]; dup {
						t.Fatalf("%s twice", k)
					}
					got[k] = e
				}
			}
		}
		if !valid {
			clear(want)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
	})
}

// expectLoads adds to want what the server must take from req: what it
// says of pay.shop:grpc's endpoints, by address and port, or by a
// locality that holds one of them (eu-1a's pay-0).
func expectLoads(want map[string]wire.EndpointOutcome, observer string, req *lrsv3.LoadStatsRequest) {
	add := func(id string, ok, failed uint64) {
		if ok == 0 && failed == 0 {
			return
		}
		e := want[observer+" "+id]
		e.Namespace, e.Service, e.Instance, e.Incarnation = "shop", "pay", id, 7
		e.Success = int(min(uint64(e.Success)+min(ok, maxCalls), maxCalls))
		e.Failure = int(min(uint64(e.Failure)+min(failed, maxCalls), maxCalls))
		want[observer+" "+id] = e
	}
	for _, cs := range req.ClusterStats {
		if cs.ClusterName != "pay.shop:grpc" {
			continue
		}
		for _, ls := range cs.UpstreamLocalityStats {
			if len(ls.UpstreamEndpointStats) == 0 {
				if l := ls.GetLocality(); l.GetRegion() == "eu" && l.GetZone() == "eu-1a" {
					add("pay-0", ls.TotalSuccessfulRequests, ls.TotalErrorRequests)
				}
				continue
			}
			for _, es := range ls.UpstreamEndpointStats {
				sa := es.GetAddress().GetSocketAddress()
				a, err := netip.ParseAddr(sa.GetAddress())
				if err != nil || sa.GetPortValue() > math.MaxUint16 {
					continue
				}
				for _, in := range lrsInstances {
					if in.addr == netip.AddrPortFrom(a.Unmap(), uint16(sa.GetPortValue())) {
						add(in.id, es.TotalSuccessfulRequests, es.TotalErrorRequests)
					}
				}
			}
		}
	}
}

// lrsTable publishes pay.shop (port grpc) with lrsInstances in
// rotation, and vault.bank (port grpc) without instances.
func lrsTable(t testing.TB, tb *statustest.Table) {
	port := []status.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}
	pay := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay", Ports: port}}
	for _, in := range lrsInstances {
		x := statustest.Ready(in.id, in.addr.Addr().String()).In("eu", in.zone)
		x.Incarnation, x.Ports = 7, map[string]uint16{"grpc": in.addr.Port()}
		pay.Instances = append(pay.Instances, x)
	}
	tb.PublishAt(t, 1, pay, statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "bank", Name: "vault", Ports: port}})
}
