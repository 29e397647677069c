package server_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"coily.dev/coily/internal/benchstat"
	"coily.dev/coily/internal/gitfixture"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/sandbox"
)

// BenchmarkExecWorkspace measures an Exec of /bin/true under bubblewrap
// in a named workspace, a git checkout of 3000 files in 150 directories:
// the pipeline, the scan before the command, the sandbox, and the check
// after it.
// Run: go test -run '^$' -bench ExecWorkspace -benchtime 200x ./server/
func BenchmarkExecWorkspace(b *testing.B) {
	if _, err := sandbox.BwrapPath(); err != nil {
		b.Skip(err)
	}
	ws := gitfixture.Checkout(b, filepath.Join(b.TempDir(), "ws"), 150, 20)
	testserver.SandboxWorkspace(b, ws)
	in := testserver.Start(b, testserver.Options{Policy: fmt.Sprintf(`version: 1
limits: {concurrency: 4}
workspaces: {ws: %s}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands: [{name: "true", binary: /bin/true, workspace: ws}]
`, ws)})
	ctx := context.Background()
	req := &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}
	if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
		b.Fatal(err)
	}
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(t0))
	}
	b.StopTimer()
	benchstat.Report(b, "exec", took)
}
