package wire

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/refusal"
)

// enumMessage builds a message type with an enum field, an enum list and a
// nested message, to check the generic validation against unknown enum
// values (requests gain enums in later API versions).
func enumMessage(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	fd := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("enumtest.proto"),
		Package: proto.String("enumtest"),
		Syntax:  proto.String("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name: proto.String("Mode"),
			Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: proto.String("MODE_UNSPECIFIED"), Number: proto.Int32(0)},
				{Name: proto.String("MODE_A"), Number: proto.Int32(1)},
			},
		}},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Req"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("mode"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum(),
					TypeName: proto.String(".enumtest.Mode"), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String("mode")},
				{Name: proto.String("modes"), Number: proto.Int32(2), Type: descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum(),
					TypeName: proto.String(".enumtest.Mode"), Label: descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum(), JsonName: proto.String("modes")},
				{Name: proto.String("child"), Number: proto.Int32(3), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(),
					TypeName: proto.String(".enumtest.Req"), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String("child")},
			},
		}},
	}
	f, err := protodesc.NewFile(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f.Messages().Get(0)
}

func TestValidateMessageEnums(t *testing.T) {
	md := enumMessage(t)
	fields := md.Fields()
	build := func(set func(m *dynamicpb.Message)) *dynamicpb.Message {
		m := dynamicpb.NewMessage(md)
		set(m)
		return m
	}
	tests := []struct {
		name string
		msg  *dynamicpb.Message
		ok   bool
	}{
		{"known value", build(func(m *dynamicpb.Message) { m.Set(fields.ByName("mode"), protoreflect.ValueOfEnum(1)) }), true},
		{"unknown value", build(func(m *dynamicpb.Message) { m.Set(fields.ByName("mode"), protoreflect.ValueOfEnum(7)) }), false},
		{"negative value", build(func(m *dynamicpb.Message) { m.Set(fields.ByName("mode"), protoreflect.ValueOfEnum(-1)) }), false},
		{"unknown in list", build(func(m *dynamicpb.Message) {
			l := m.Mutable(fields.ByName("modes")).List()
			l.Append(protoreflect.ValueOfEnum(1))
			l.Append(protoreflect.ValueOfEnum(99))
		}), false},
		{"unknown in nested message", build(func(m *dynamicpb.Message) {
			c := m.Mutable(fields.ByName("child")).Message()
			c.Set(fields.ByName("mode"), protoreflect.ValueOfEnum(5))
		}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckMessage(tt.msg)
			if tt.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && refusal.As(err).Code != refusal.BadRequest {
				t.Fatalf("code %s", refusal.As(err).Code)
			}
		})
	}
}

// The codec turns undecodable bytes into a marked request that validation
// refuses; decodable requests pass through unchanged.
func TestRequestCodec(t *testing.T) {
	good, _ := proto.Marshal(&coilyv1.ExecRequest{Argv: []string{"/bin/echo", "hi"}})
	for _, tt := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"valid", good, true},
		{"truncated", good[:len(good)-2], false},
		{"invalid UTF-8", []byte{0x0a, 0x02, 0xff, 0xfe}, false},
		{"bad wire type", []byte{0x0f}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var req coilyv1.ExecRequest
			if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(tt.data)}, &req); err != nil {
				t.Fatal(err)
			}
			err := CheckMessage(&req)
			if tt.ok != (err == nil) {
				t.Fatalf("validate: %v, want ok=%v", err, tt.ok)
			}
		})
	}
	if (Codec{}).Name() != encoding.GetCodecV2(protoenc.Name).Name() {
		t.Fatal("codec must replace the proto codec")
	}
}

// execSeeds are hostile and valid ExecRequests, shared by the table test's
// spirit and the fuzz corpus.
func execSeeds() []*coilyv1.ExecRequest {
	return []*coilyv1.ExecRequest{
		{Argv: []string{"/bin/echo", "hi"}},
		{Argv: []string{"/bin/sh", "-c", "exit 7"}, Stdin: []byte("data"), Timeout: durationpb.New(1e9)},
		{},
		{Argv: []string{"bin/echo"}},
		{Argv: []string{"/bin/../bin/echo"}},
		{Argv: []string{"/bin/echo", "a\x00b"}},
		{Argv: []string{"/bin/echo", strings.Repeat("x", 200<<10)}},
		{Argv: []string{"/bin/true"}, Timeout: durationpb.New(-1)},
		{Argv: []string{"/bin/true"}, Note: strings.Repeat("n", 2000)},
		{Argv: []string{"/bin/sh"}, Env: map[string]string{"GREETING": "hi", "A=B": "x"}, Cwd: "sub/dir"},
		{Argv: []string{"/bin/sh"}, Env: map[string]string{"X": "a\x00b"}, Cwd: "../.."},
	}
}

// FuzzValidateExec decodes arbitrary bytes as the server would and checks
// that validation never panics and that whatever it accepts honours every
// limit the pipeline relies on.
func FuzzValidateExec(f *testing.F) {
	for _, req := range execSeeds() {
		b, _ := proto.MarshalOptions{}.Marshal(req)
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req coilyv1.ExecRequest
		if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &req); err != nil {
			t.Fatal(err)
		}
		err := CheckMessage(&req)
		if err == nil {
			err = CheckExec(&req)
		}
		if err != nil {
			if refusal.As(err).Code != refusal.BadRequest {
				t.Fatalf("refusal code %s", refusal.As(err).Code)
			}
			return
		}
		argv := req.GetArgv()
		total := 0
		for _, a := range argv {
			total += len(a)
			if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
				t.Fatalf("accepted argv entry %q", a)
			}
		}
		pathOK := len(argv) > 0 && filepath.IsAbs(argv[0]) && filepath.Clean(argv[0]) == argv[0]
		if len(argv) == 0 || len(argv) > maxArgs || total > maxArgvBytes || !pathOK && !policy.IsCommandName(argv[0]) ||
			len(req.GetStdin()) > maxStdinBytes || len(req.ProtoReflect().GetUnknown()) > 0 ||
			bytes.Contains([]byte(req.GetNote()), []byte{0}) || len(req.GetNote()) > maxTextBytes {
			t.Fatalf("accepted a request outside the limits: %d args", len(argv))
		}
		if len(req.GetEnv()) > maxEnv {
			t.Fatalf("accepted %d env entries", len(req.GetEnv()))
		}
		for k, v := range req.GetEnv() {
			if !envName.MatchString(k) || len(v) > maxEnvValue || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("accepted env %q", k)
			}
		}
	})
}
