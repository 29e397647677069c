package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"coily.dev/coily/client"
	"coily.dev/coily/internal/benchstat"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

// BenchmarkCLI measures what a user feels, as whole processes, against a
// warm server on the local socket, each against a baseline taken in the
// same run (docs/benchmarks.md, issue 15):
//   - `coily-client version` (the lean client) and `coily version` (the
//     full binary) against a Go hello-world;
//   - `coily-client exec -- /bin/true`, `coily-exec -- /bin/true` (the
//     shims' client) and `coily exec -- /bin/true` with coily a link to
//     coily-exec beside coily-client (the dispatcher), sandboxed, against
//     the same Exec made by the Go client in this process (the
//     server-side cost); `coily version` through the dispatcher;
//   - sustained execs at concurrency 4: through the CLI, and through the
//     Go client.
func BenchmarkCLI(b *testing.B) {
	requireBwrap(b)
	dir := b.TempDir()
	lean := filepath.Join(dir, "coily-client")
	hello := filepath.Join(dir, "hello")
	// Built as scripts/release.sh builds it: static, stripped.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", lean, "../coily-client")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build coily-client: %v %s", err, out)
	}
	fast := filepath.Join(dir, "coily-exec")
	build = exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", fast, "../coily-exec")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build coily-exec: %v %s", err, out)
	}
	// The agents' layout with the dispatcher: coily -> coily-exec beside
	// coily-client, so that `coily exec -- ARGV` runs in coily-exec.
	if err := os.Symlink(fast, filepath.Join(dir, "coily")); err != nil {
		b.Fatal(err)
	}
	dispatched := filepath.Join(dir, "coily")
	src := filepath.Join(dir, "hello.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"coily dev\") }\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", hello, src).CombinedOutput(); err != nil {
		b.Fatalf("build hello: %v %s", err, out)
	}
	state := shortDir(b)
	p := startServe(b, state, writePolicy(b, state, `version: 1
limits: {concurrency: 8, per_principal: 8}
roles: {operator: {permissions: [exec], commands: ["true"]}}
commands: [{name: "true", binary: /bin/true, sandbox: bwrap}]
`))
	c, err := client.DialLocal(p.socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	goExec := func() {
		if _, err := c.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	// The same Exec on a connection of its own, as a process makes: what
	// a new connection costs, apart from starting a process.
	freshExec := func() {
		fc, err := client.DialLocal(p.socket)
		if err != nil {
			b.Fatal(err)
		}
		defer fc.Close()
		if _, err := fc.Exec(ctx, &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v %s", name, args, err, out)
		}
	}
	goExec()
	var helloT, leanV, fullV, goT, freshT, cliT, fastT, dispT, dispV []time.Duration
	withSocket := func(name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "COILY_SOCKET="+p.socket)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v %s", name, args, err, out)
		}
	}
	runFast := func() { withSocket(fast, "--", "/bin/true") }
	b.ResetTimer()
	for range b.N {
		for _, m := range []struct {
			into *[]time.Duration
			f    func()
		}{
			{&helloT, func() { run(hello) }},
			{&leanV, func() { run(lean, "version") }},
			{&fullV, func() { run(coilyBin, "version") }},
			{&goT, goExec},
			{&freshT, freshExec},
			{&cliT, func() { run(lean, "--socket", p.socket, "exec", "--", "/bin/true") }},
			{&fastT, runFast},
			{&dispT, func() { withSocket(dispatched, "exec", "--", "/bin/true") }},
			{&dispV, func() { withSocket(dispatched, "version") }},
		} {
			t0 := time.Now()
			m.f()
			*m.into = append(*m.into, time.Since(t0))
		}
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 { return benchstat.MS(benchstat.Percentile(d, 50)) }
	b.ReportMetric(p50(helloT), "hello-ms")
	b.ReportMetric(p50(leanV), "client-version-ms")
	b.ReportMetric(p50(fullV), "coily-version-ms")
	b.ReportMetric(p50(goT), "server-exec-ms")
	b.ReportMetric(p50(freshT), "fresh-conn-exec-ms")
	b.ReportMetric(p50(cliT), "cli-exec-ms")
	b.ReportMetric(p50(cliT)/p50(goT), "cli/server")
	b.ReportMetric(p50(fastT), "coily-exec-ms")
	b.ReportMetric(p50(fastT)/p50(goT), "coily-exec/server")
	b.ReportMetric(p50(dispT)/p50(goT), "dispatched-exec/server")
	b.ReportMetric(p50(dispV), "dispatched-version-ms")
	const n, workers = 200, 4
	b.ReportMetric(rate(n, workers, func() { run(lean, "--socket", p.socket, "exec", "--", "/bin/true") }), "cli-execs/s")
	b.ReportMetric(rate(n, workers, runFast), "coily-exec-execs/s")
	b.ReportMetric(rate(n, workers, goExec), "go-execs/s")
}

// rate runs f n times on workers goroutines and returns runs per second.
func rate(n, workers int, f func()) float64 {
	var wg sync.WaitGroup
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	t0 := time.Now()
	for range workers {
		wg.Go(func() {
			for range jobs {
				f()
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(t0).Seconds()
}
