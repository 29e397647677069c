package wire

import (
	"bytes"

	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// undecodableMarker is set as the only (unknown) content of a request that
// could not be decoded. Field 536870911 is the largest field number; no
// coily message will ever use it.
var undecodableMarker = protowire.AppendBytes(protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.BytesType), []byte("coily: undecodable request"))

// Codec is gRPC's proto codec, except for requests that cannot be
// decoded: grpc-go would answer those itself with INTERNAL, unaudited and
// without a refusal code. Instead the request is delivered empty and marked,
// and the interceptor refuses it as bad-request and audits it.
type Codec struct{}

// Name is the proto codec's, which this one replaces.
func (Codec) Name() string { return protoenc.Name }

// Marshal is the proto codec's.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2(protoenc.Name).Marshal(v)
}

// Unmarshal decodes data into v, or leaves v empty and marked.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := encoding.GetCodecV2(protoenc.Name).Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	m.ProtoReflect().SetUnknown(bytes.Clone(undecodableMarker))
	return nil
}

func isUndecodable(m protoreflect.Message) bool {
	return bytes.Equal(m.GetUnknown(), undecodableMarker)
}
