package etcdstore

import (
	"context"
	"path"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// Outcomes of a call, as Config.Observe hears them.
const (
	OutcomeOK          = "ok"
	OutcomeUnavailable = "unavailable" // store.ErrUnavailable: refused as state-unavailable
	OutcomeError       = "error"
)

// observedOps are the etcd methods the store calls, by their label; any
// other method is "other", so the label set stays bounded.
var observedOps = map[string]string{
	"Range": "range", "Put": "put", "DeleteRange": "delete", "Txn": "txn",
	"LeaseGrant": "lease_grant", "LeaseRevoke": "lease_revoke", "Authenticate": "authenticate", "Watch": "watch",
}

// opLabel is the label of a gRPC method name ("/etcdserverpb.KV/Txn").
func opLabel(method string) string {
	if op, ok := observedOps[path.Base(method)]; ok && strings.HasPrefix(method, "/etcdserverpb.") {
		return op
	}
	return "other"
}

func outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case unavailable(err):
		return OutcomeUnavailable
	}
	return OutcomeError
}

// observeDial are the dial options that report every call to the
// cluster to observe: each unary call when it ends, each stream (the
// watch) when it opens.
func observeDial(observe func(op, outcome string, took time.Duration)) []grpc.DialOption {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		observe(opLabel(method), outcome(err), time.Since(start))
		return err
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		start := time.Now()
		s, err := streamer(ctx, desc, cc, method, opts...)
		observe(opLabel(method), outcome(err), time.Since(start))
		return s, err
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)}
}
