package xdsserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/cairn-sd/cairn/internal/acl"
	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// The stream fuzz targets (fuzz_test.go) drive one real Server, made
// once per fuzz process, with a fresh stream per input: a sequence of
// client requests decoded from the input, each followed by a barrier (a
// request whose answer proves the server handled everything before it),
// with every response checked against what the stream asked for.

// fuzzWait bounds every wait for an answer: a server that does not
// answer a barrier within it has stopped serving the stream.
const fuzzWait = 10 * time.Second

// fuzzHub is the server the stream fuzz targets share.
type fuzzHub struct {
	tb  *statustest.Table
	pub *cstatus.Publisher
	cc  *grpc.ClientConn
	reg *prometheus.Registry
	// now is the server's clock: moved on a minute per input, so that
	// every input's stream opens in an admission window of its own (the
	// cap on reconnections is tested in admission_test.go); within an
	// input it stands still, so that a stream's first admission goes
	// and the next wait for the next input (the admission lane's paths
	// run; nothing the checks wait for is an admission).
	mu  sync.Mutex
	now time.Time
}

func newFuzzHub(f *testing.F) *fuzzHub {
	f.Helper()
	tb := statustest.New(f, 8)
	h := &fuzzHub{tb: tb, pub: tb.Publisher, now: time.Unix(1_700_000_000, 0), reg: prometheus.NewRegistry()}
	h.publish(f, 0)
	a, err := acl.New(acl.Config{Enabled: true, Tokens: []acl.Token{
		{Secret: shopReader, Scope: acl.Reader, Namespaces: []string{"shop"}},
		{Secret: adminToken, Scope: acl.Admin},
	}})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := xdsserver.New(xdsserver.Config{Table: tb.Publisher, Logger: slog.New(slog.DiscardHandler), Registerer: h.reg,
		Authorizer: func() *acl.Authorizer { return a }, AdmissionRate: -1,
		// Caps low enough that long inputs reach them (the stream then
		// ends with RESOURCE_EXHAUSTED, which ending accepts).
		Limits: xdsserver.Limits{MaxNames: 16, MaxTypes: 6},
		Now:    func() time.Time { h.mu.Lock(); defer h.mu.Unlock(); return h.now }})
	if err != nil {
		f.Fatal(err)
	}
	addr, stop, err := xdstest.Serve(srv)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(stop)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cc.Close() })
	h.cc = cc
	return h
}

// next starts an input: the clock moves on, and the table is the first
// variant again.
func (h *fuzzHub) next(t testing.TB) {
	h.mu.Lock()
	h.now = h.now.Add(time.Minute)
	h.mu.Unlock()
	h.publish(t, 0)
}

// after checks the server once an input's stream has ended: within
// fuzzWait it counts no stream open. (Mostly at once: a handler returns
// before its client sees the end; but grpc-go ends a stream whose
// request does not decode itself, before the handler sees the error.)
func (h *fuzzHub) after() error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(fuzzWait)
	for {
		n, err := h.openStreams()
		if err != nil || n == 0 {
			return err
		}
		select {
		case <-tick.C:
		case <-deadline:
			return fmt.Errorf("the server counts %v streams open %v after the input's ended", n, fuzzWait)
		}
	}
}

// openStreams returns the server's count of open streams.
func (h *fuzzHub) openStreams() (float64, error) {
	mfs, err := h.reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == "cairn_xds_streams" {
			return mf.GetMetric()[0].GetGauge().GetValue(), nil
		}
	}
	return 0, nil
}

// publish publishes variant v of the table: pay.shop (port grpc, two
// instances, each in rotation or withdrawn by v's bits 2 and 3), and
// with bit 0 cart.shop (port http), with bit 1 vault.bank (port grpc),
// which the shop reader's token may not see.
func (h *fuzzHub) publish(t testing.TB, v byte) {
	grpcPort := []cstatus.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}
	svcs := []cstatus.ServiceInfo{{}, {Namespace: "shop", Name: "pay", Ports: grpcPort}}
	if v&1 != 0 {
		svcs = append(svcs, cstatus.ServiceInfo{Namespace: "shop", Name: "cart", Ports: []cstatus.Port{{Name: "http", Number: 80, Protocol: "tcp"}}})
	}
	if v&2 != 0 {
		svcs = append(svcs, cstatus.ServiceInfo{Namespace: "bank", Name: "vault", Ports: grpcPort})
	}
	es := []cstatus.Entry{inRotation, inRotation}
	if v&4 != 0 {
		es[1] = withdrawn
	}
	if v&8 != 0 {
		es[0] = withdrawn
	}
	publishServices(t, h.tb, svcs, fixedBackends(), es)
}

// fuzzInput reads a fuzz input a byte at a time; past its end it reads
// zeros.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) more() bool { return len(in.b) > 0 }

func (in *fuzzInput) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

func (in *fuzzInput) pick(n int) int { return int(in.byte()) % n }

// Alphabets the inputs choose from: real names and junk, served types
// and others.
var (
	fuzzNames = []string{"pay.shop:grpc", "pay.shop", "cart.shop:http", "cart.shop", "vault.bank:grpc", "vault.bank",
		"*", "", "nobody.shop:grpc", "pay.shop:http", "pay.shop:", ":grpc", ".", "pay.shop:grpc:grpc", "PAY.SHOP:grpc",
		"pay.shop\x00:grpc", "ünï.shop:grpc", strings.Repeat("x", 300)}
	fuzzTypes = []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType,
		"", "type.googleapis.com/envoy.config.cluster.v3.Cluster ", "type.googleapis.com/google.protobuf.Empty"}
	fuzzVersions = []string{"", "1", "0-abc", "1001-", "-", "99999999999-deadbeef", "18446744073709551615-x",
		"18446744073709551616-x", "abc"}
	fuzzNodes = []*corev3.Node{nil, {Id: "fuzz"}, {Id: "fuzz", Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"}},
		{Id: "other", Locality: &corev3.Locality{Region: "eu", Zone: "eu-1b"}}, {Locality: &corev3.Locality{Region: "nowhere"}},
		{Id: strings.Repeat("n", 300), Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a", SubZone: "rack-1"}}}
)

// fuzzToken picks a stream's token: the shop reader's, the admin's,
// none, or one the server does not know. It reports whether the server
// must let the stream in, and the namespaces it may see (nil: all).
func fuzzToken(in *fuzzInput) (tok string, valid bool, shopOnly bool) {
	switch b := in.byte(); {
	case b%16 == 14:
		return "", false, false
	case b%16 == 15:
		return "not-a-token-0123456789", false, false
	case b&1 == 0:
		return shopReader, true, true
	default:
		return adminToken, true, false
	}
}

// resourceName decodes a resource and returns its own name, checking
// that it is a resource of type url.
func resourceName(url string, a *anypb.Any) (string, error) {
	if a == nil {
		return "", errors.New("no body")
	}
	if a.TypeUrl != url {
		return "", fmt.Errorf("body of type %s in a response of type %s", a.TypeUrl, url)
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return "", fmt.Errorf("body does not decode: %v", err)
	}
	switch r := m.(type) {
	case *clusterv3.Cluster:
		return r.Name, nil
	case *endpointv3.ClusterLoadAssignment:
		return r.ClusterName, nil
	case *listenerv3.Listener:
		return r.Name, nil
	case *routev3.RouteConfiguration:
		return r.Name, nil
	}
	return "", fmt.Errorf("a %T", m)
}

// namespaceOf returns the namespace of a resource name
// ("<svc>.<ns>[:<port>]").
func namespaceOf(name string) string {
	host, _, _ := strings.Cut(name, ":")
	_, ns, _ := strings.Cut(host, ".")
	return ns
}

// ending checks how a stream ended before the client closed it: with a
// status that says what the client did wrong or that it should retry,
// never Unknown or Internal, nor OK (the server is not shutting down);
// Unauthenticated only for a token the server does not know.
func ending(err error, valid bool) error {
	if errors.Is(err, io.EOF) {
		return errors.New("the server ended the stream (OK) while the client was still sending")
	}
	st, ok := grpcstatus.FromError(err)
	if !ok {
		return fmt.Errorf("the stream ended without a gRPC status: %v", err)
	}
	switch st.Code() {
	case codes.Unknown, codes.Internal, codes.OK:
		return fmt.Errorf("the stream ended with %v", err)
	case codes.Unauthenticated:
		if valid {
			return fmt.Errorf("a valid token was refused: %v", err)
		}
		return nil
	}
	if !valid {
		return fmt.Errorf("an unknown token got %v, want UNAUTHENTICATED", err)
	}
	return nil
}

// garbage sends a frame that is not a request: the server must end the
// stream, with a status that says what the client did wrong (ending) —
// or INTERNAL from grpc-go's decoder, which writes that status itself
// before the server's handler sees the error (serverStream.RecvMsg), so
// that the server cannot say INVALID_ARGUMENT. Responses still coming
// are not checked.
func garbage[Resp any](cs grpc.ClientStream, f []byte, recv <-chan Resp, done <-chan error, valid bool) error {
	_ = cs.SendMsg(rawFrame(f)) // an error: the stream ended, done says how
	deadline := time.After(fuzzWait)
	for {
		select {
		case _, ok := <-recv:
			if !ok {
				recv = nil
			}
		case err := <-done:
			if st := grpcstatus.Convert(err); st.Code() == codes.Internal && strings.HasPrefix(st.Message(), "grpc: failed to unmarshal") {
				return nil
			}
			return ending(err, valid)
		case <-deadline:
			return fmt.Errorf("the stream went on after a request that does not decode (%x)", f)
		}
	}
}

// closing ends a stream from the client side and checks that the server
// ends it with OK (valid: its token is one the server knows; otherwise
// as ending has it), within fuzzWait, after whatever responses it still
// had (each handed to check).
func closing[Resp any](closeSend func() error, recv <-chan Resp, done <-chan error, valid bool, check func(Resp) error) error {
	if err := closeSend(); err != nil {
		return fmt.Errorf("closing: %v", err)
	}
	deadline := time.After(fuzzWait)
	for {
		select {
		case r, ok := <-recv:
			if !ok {
				recv = nil // done says how it ended
				continue
			}
			if err := check(r); err != nil {
				return err
			}
		case err := <-done:
			if !valid {
				return ending(err, valid)
			}
			if !errors.Is(err, io.EOF) {
				return fmt.Errorf("the stream ended with %v after the client closed it, want OK", err)
			}
			return nil
		case <-deadline:
			return errors.New("the server did not end the stream within 10s of the client closing it")
		}
	}
}

// receive runs recv on its own goroutine, handing each message to the
// channel returned and the error that ends the stream to done, then
// closing the channel; it ends when recv fails (the stream's context
// ends it at the latest).
func receive[Resp any](recv func() (Resp, error)) (<-chan Resp, <-chan error) {
	out, done := make(chan Resp), make(chan error, 1)
	go func() {
		defer close(out)
		for {
			r, err := recv()
			if err != nil {
				done <- err
				return
			}
			out <- r
		}
	}()
	return out, done
}

// drain receives what is left of a stream, so that its receiving
// goroutine ends: the stream's context has been cancelled.
func drain[Resp any](recv <-chan Resp) {
	for range recv {
	}
}

// frame reads a length byte, then up to that many bytes.
func (in *fuzzInput) frame() []byte {
	n := min(int(in.byte()), len(in.b))
	f := in.b[:n]
	in.b = in.b[n:]
	return f
}

// rawFrame is a request's encoding as the input has it, sent as it is.
type rawFrame []byte

// rawCodec sends a rawFrame as it is and every other message in its
// protobuf encoding, so that the server's decoder gets the bytes a
// fuzz input made; responses are decoded as usual.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	if f, ok := v.(rawFrame); ok {
		return f, nil
	}
	return proto.Marshal(v.(proto.Message))
}

func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }

// openStream opens a stream of method (the ADS service's) on h's
// connection, whose messages go through rawCodec.
// fuzzStream opens a stream of method as the caller in's first byte
// names (fuzzToken), bounded by 3 × fuzzWait; cancel ends it.
func (h *fuzzHub) fuzzStream(in *fuzzInput, method string) (cs grpc.ClientStream, cancel func(), valid, shopOnly bool, err error) {
	tok, valid, shopOnly := fuzzToken(in)
	ctx, cancel := context.WithTimeout(context.Background(), 3*fuzzWait)
	if tok != "" {
		ctx = withToken(ctx, tok)
	}
	if cs, err = h.openStream(ctx, method); err != nil {
		cancel()
		return nil, nil, false, false, fmt.Errorf("opening a stream: %v", err)
	}
	return cs, cancel, valid, shopOnly, nil
}

func (h *fuzzHub) openStream(ctx context.Context, method string) (grpc.ClientStream, error) {
	return h.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
		"/envoy.service.discovery.v3.AggregatedDiscoveryService/"+method, grpc.ForceCodec(rawCodec{}))
}

// recvAs returns a receiving function of messages of type M from cs.
func recvAs[M any, PM interface {
	*M
	proto.Message
}](cs grpc.ClientStream) func() (PM, error) {
	return func() (PM, error) {
		m := PM(new(M))
		if err := cs.RecvMsg(m); err != nil {
			return nil, err
		}
		return m, nil
	}
}

// barrierName is the name of the nth barrier: a route configuration no
// input names.
func barrierName(n int) string { return "cairn-fuzz-barrier-" + strconv.Itoa(n) }
