package agent

import (
	"bytes"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestExactCodec: a response read from several frames is whole, and
// holds none of the frames' bytes (gRPC frees them, or a pool hands them
// out again, once Unmarshal returns); a request is written as protobuf
// writes it; anything not a protobuf message is refused.
func TestExactCodec(t *testing.T) {
	resp := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "42", Nonce: "n1", TypeUrl: endpointType,
		RemovedResources: []string{"gone.shop"}}
	for _, name := range []string{"front.shop", "back.shop", "db.shop"} {
		resp.Resources = append(resp.Resources, &discoveryv3.Resource{Name: name, Version: "7",
			Resource: &anypb.Any{TypeUrl: endpointType, Value: bytes.Repeat([]byte(name), 2000)}})
	}
	wire, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var frames mem.BufferSlice
	for rest := wire; len(rest) > 0; {
		n := min(len(rest), 16<<10)
		frames = append(frames, mem.SliceBuffer(bytes.Clone(rest[:n])))
		rest = rest[n:]
	}
	if len(frames) < 2 {
		t.Fatalf("%d bytes make %d frame; want several", len(wire), len(frames))
	}
	got := &discoveryv3.DeltaDiscoveryResponse{}
	if err := (exactCodec{}).Unmarshal(frames, got); err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		clear(f.ReadOnlyData()) // what a pool reusing the frame would do
	}
	if !proto.Equal(got, resp) {
		t.Errorf("the response read changed once its frames were reused: %v", got)
	}

	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: endpointType, ResponseNonce: "n1", ResourceNamesSubscribe: []string{"front.shop"}}
	out, err := (exactCodec{}).Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(req)
	if !bytes.Equal(out.Materialize(), want) {
		t.Errorf("Marshal = %x; want %x", out.Materialize(), want)
	}
	if _, err := (exactCodec{}).Marshal("not a message"); err == nil {
		t.Error("Marshal of a string: no error")
	}
	if err := (exactCodec{}).Unmarshal(frames, new(string)); err == nil {
		t.Error("Unmarshal into a string: no error")
	}
}
