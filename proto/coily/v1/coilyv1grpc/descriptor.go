package coilyv1grpc

// The service's descriptor is generated into coilyv1connect, beside the
// clients' stubs, so that the clients link no grpc-go (buf.gen.yaml).
// Imported here, it is registered wherever the server's stubs are linked:
// the server's reflection serves it.
import _ "coily.dev/coily/proto/coily/v1/coilyv1connect"
