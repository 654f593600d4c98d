// Package xdstest is a raw incremental (delta) ADS client for tests and
// the xDS bench: no delta client exists in grpc-go (it speaks state of
// the world only) or go-control-plane, and Envoy cannot run here, so
// cairn speaks the protocol itself, one message at a time.
//
// A Stream is one DeltaAggregatedResources stream; many share one
// connection (Dial). A Decoder decodes each distinct (name, version) of
// a resource once, however many streams receive it, so that a load
// generator of thousands of streams does not become the bottleneck.
package xdstest

import (
	"context"
	"errors"
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// Dial returns a client connection to addr, without TLS (loopback
// tests and benches). It connects lazily, on the first stream.
func Dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("xdstest: dialling %q: %w", addr, err)
	}
	return cc, nil
}

// Options configures a Stream.
type Options struct {
	// Node is sent in the stream's first request. Defaults to node id
	// "xdstest" in region "eu", zone "eu-1a".
	Node *corev3.Node
	// Token, when set, is sent as gRPC metadata
	// `authorization: Bearer <Token>` on the stream.
	Token string
}

// Stream is one delta ADS stream. Send methods must not be called
// concurrently with each other, nor Recv with itself (gRPC's rule); a
// sender and a receiver may run at once.
type Stream struct {
	s        grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
	node     *corev3.Node
	sentNode bool
}

// Open opens a delta ADS stream on cc. The stream ends with ctx.
func Open(ctx context.Context, cc grpc.ClientConnInterface, o Options) (*Stream, error) {
	if o.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+o.Token)
	}
	node := o.Node
	if node == nil {
		node = &corev3.Node{Id: "xdstest", Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"}}
	}
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		return nil, fmt.Errorf("xdstest: opening a delta stream: %w", err)
	}
	return &Stream{s: s, node: node}, nil
}

// Send sends req, adding the node to the stream's first request.
func (s *Stream) Send(req *discoveryv3.DeltaDiscoveryRequest) error {
	if !s.sentNode {
		req.Node, s.sentNode = s.node, true
	}
	if err := s.s.Send(req); err != nil {
		return fmt.Errorf("xdstest: sending a %s request: %w", req.TypeUrl, err)
	}
	return nil
}

// Subscribe subscribes to names of type url, declaring the versions
// held (nil: none), as a client does when it starts or reconnects.
func (s *Stream) Subscribe(url string, names []string, held map[string]string) error {
	return s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: url, ResourceNamesSubscribe: names, InitialResourceVersions: held})
}

// Unsubscribe unsubscribes from names of type url.
func (s *Stream) Unsubscribe(url string, names []string) error {
	return s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: url, ResourceNamesUnsubscribe: names})
}

// Ack acknowledges resp.
func (s *Stream) Ack(resp *discoveryv3.DeltaDiscoveryResponse) error {
	return s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce})
}

// Nack refuses resp, giving why as the error detail.
func (s *Stream) Nack(resp *discoveryv3.DeltaDiscoveryResponse, why string) error {
	return s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce,
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: why}})
}

// Recv returns the next response.
func (s *Stream) Recv() (*discoveryv3.DeltaDiscoveryResponse, error) {
	resp, err := s.s.Recv()
	if err != nil {
		return nil, fmt.Errorf("xdstest: receiving: %w", err)
	}
	return resp, nil
}

// CloseSend tells the server the client sends no more.
func (s *Stream) CloseSend() error { return s.s.CloseSend() }

// ErrNoResource is returned by a Decoder given a resource without a
// body (a delta response names removed resources apart, so this is a
// server's mistake).
var ErrNoResource = errors.New("xdstest: resource has no body")
