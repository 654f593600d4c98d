package agent

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// exactCodec is gRPC's protobuf codec without its buffer pool: each
// message is read into, and written from, a buffer of its own size that
// the collector takes back. gRPC's pool gives a message of 17 KiB to
// 1 MiB a 1 MiB buffer (800 instances are 180 KB) and keeps every buffer
// it hands out in a sync.Pool until two collections have passed, which
// an agent idle between responses may not see for minutes: 1.3 of the
// 4 MiB its heap held at 800 instances (bench/cmd/agentmem -profile).
// An agent reads a response now and then; a pool saves it nothing.
type exactCodec struct{}

var _ encoding.CodecV2 = exactCodec{}

func (exactCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("agent: cannot marshal %T, not a protobuf message", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (exactCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("agent: cannot unmarshal into %T, not a protobuf message", v)
	}
	// Materialize copies the frames into one new slice; Unmarshal copies
	// what it keeps out of it, so the message holds none of gRPC's
	// buffers.
	return proto.Unmarshal(data.Materialize(), m)
}

// Name is the content subtype, protobuf's, as gRPC's own codec names it.
func (exactCodec) Name() string { return "proto" }
