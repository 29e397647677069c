package bridge_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"coily.dev/coily/bridge"
	"coily.dev/coily/client/folder"
	"coily.dev/coily/internal/benchstat"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

const benchPolicy = `version: 1
limits: {concurrency: 4}
roles:
  operator:
    permissions: [exec, relay, keys]
    commands: ["*"]
    sandboxes: [demo]
grants:
  - principals: ["sandbox:demo"]
    roles: [operator]
commands:
  - {name: "true", binary: /bin/true, sandbox: native}
`

// BenchmarkFilesystemVsGRPC measures the filesystem round trip of an Exec
// of /bin/true (the sandbox client signs and writes the request file, the
// bridge relays it, the server runs it, the bridge writes the response,
// the client reads it) against the same Exec over gRPC on the local
// socket, interleaved in the same run.
// Run: go test -run '^$' -bench FilesystemVsGRPC -benchtime 1000x ./bridge/
func BenchmarkFilesystemVsGRPC(b *testing.B) {
	in := testserver.Start(b, testserver.Options{Policy: benchPolicy})
	ctx, cancel := context.WithCancel(context.Background())
	k, err := in.Client.API.IssueKey(ctx, &coilyv1.IssueKeyRequest{Sandbox: "demo"})
	if err != nil {
		b.Fatal(err)
	}
	mount := b.TempDir()
	done := make(chan error, 1)
	go func() {
		done <- bridge.Run(ctx, bridge.Config{Mounts: []bridge.Mount{{Dir: mount, Sandbox: "demo"}},
			Relayer: bridge.NewGRPCRelayer(in.Client.API), Logger: slog.New(slog.DiscardHandler)})
	}()
	defer func() { cancel(); <-done }()
	fs := &folder.Client{Mount: mount, Key: folder.KeyFile{Sandbox: "demo", Key: k.GetKey().GetSecret(), Generation: 1}}
	req := &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}
	waitBridge := time.Now().Add(10 * time.Second)
	for {
		if _, err := fs.Exec(ctx, req, io.Discard, io.Discard); err == nil {
			break
		} else if time.Now().After(waitBridge) {
			b.Fatal(err)
		}
	}
	if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
		b.Fatal(err)
	}
	d := benchstat.Interleave(b, func() {
		if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	}, func() {
		if _, err := fs.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	})
	viaGRPC, viaFS := d[0], d[1]
	benchstat.Report(b, "grpc", viaGRPC)
	benchstat.Report(b, "fs", viaFS)
	b.ReportMetric(benchstat.Ratio(viaFS, viaGRPC, 50), "fs/grpc-p50")
	b.ReportMetric(benchstat.Ratio(viaFS, viaGRPC, 99), "fs/grpc-p99")
}
