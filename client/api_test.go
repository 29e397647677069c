package client

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"coily.dev/coily/proto/coily/v1/coilyv1connect"
)

// TestAPIHasEveryMethod: API is written by hand (so the client does not
// link grpc-go's generated stubs); it must have every method of the
// service, taking the method's request and returning its answer (or a
// Stream of them), and nothing the service lacks.
func TestAPIHasEveryMethod(t *testing.T) {
	sd := coilyv1connect.File_coily_v1_service_proto.Services().ByName("CoilyService")
	api := reflect.TypeFor[API]()
	if api.NumMethod() != sd.Methods().Len() {
		t.Errorf("API has %d methods, the service %d", api.NumMethod(), sd.Methods().Len())
	}
	for i := range sd.Methods().Len() {
		md := sd.Methods().Get(i)
		m, ok := api.MethodByName(string(md.Name()))
		if !ok {
			t.Errorf("API lacks %s", md.Name())
			continue
		}
		if md.IsStreamingClient() {
			t.Errorf("%s streams requests: grpclite sends one", md.Name())
		}
		in, out := goType(t, md.Input()), goType(t, md.Output())
		ft := m.Type // receiver, ctx, request → answer, error
		if ft.NumIn() != 3 || ft.In(2) != in {
			t.Errorf("%s takes %v, want (ctx, %v)", md.Name(), ft, in)
		}
		if ft.NumOut() != 2 || ft.Out(1) != reflect.TypeFor[error]() {
			t.Errorf("%s returns %v, want (answer, error)", md.Name(), ft)
			continue
		}
		got := ft.Out(0)
		if md.IsStreamingServer() {
			recv, ok := got.MethodByName("Recv")
			if !ok || recv.Type.NumOut() != 2 || recv.Type.Out(0) != out {
				t.Errorf("%s returns %v, want a stream of %v", md.Name(), got, out)
			}
			continue
		}
		if got != out {
			t.Errorf("%s returns %v, want %v", md.Name(), got, out)
		}
	}
}
func goType(t *testing.T, md protoreflect.MessageDescriptor) reflect.Type {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		t.Fatalf("%s: %v", md.FullName(), err)
	}
	return reflect.TypeOf(mt.Zero().Interface())
}
