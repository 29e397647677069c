package server_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"coily.dev/coily/client"
	"coily.dev/coily/internal/benchstat"
	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/sandbox"
)

// BenchmarkExecTrueVsForkExec measures an Exec of /bin/true through the
// local socket (identity, authorization, policy, two fsynced audit lines,
// two store commits, spawn, stream, exit) against a bare fork-exec of
// /bin/true, interleaved in the same run so both see the same machine.
// Run: go test -run '^$' -bench ExecTrueVsForkExec -benchtime 2000x ./server/
func BenchmarkExecTrueVsForkExec(b *testing.B) {
	in := testserver.Start(b, testserver.Options{})
	ctx := context.Background()
	req := &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}
	if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
		b.Fatal(err) // also warms the connection
	}
	d := benchstat.Interleave(b, func() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}, func() {
		if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	})
	fork, coily := d[0], d[1]
	benchstat.Report(b, "forkexec", fork)
	benchstat.Report(b, "coily", coily)
	b.ReportMetric(benchstat.Added(coily, fork, 50), "added-p50-ms")
	b.ReportMetric(benchstat.Added(coily, fork, 99), "added-p99-ms")
}

// BenchmarkExecTailnetVsSocket measures an Exec of /bin/true over the
// private tailnet (tsnet client node → WireGuard over loopback → the
// server's node, WhoIs identity) against the same Exec over the local
// socket, interleaved in the same run.
// Run: go test -run '^$' -bench ExecTailnetVsSocket -benchtime 2000x ./server/
func BenchmarkExecTailnetVsSocket(b *testing.B) {
	in := testserver.Start(b, testserver.Options{Tailnet: true, Policy: strings.Replace(testserver.LocalPolicy,
		"limits: {concurrency: 4}", "limits: {concurrency: 4}\ngrants: [{principals: [\"tag:agent\"], roles: [operator]}]", 1)})
	tail := in.TailnetClient(b, "bench", "tag:agent")
	ctx := context.Background()
	req := &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}
	for _, c := range []*client.Client{tail, in.Client} { // warm both connections
		if _, err := c.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	d := benchstat.Interleave(b, func() {
		if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	}, func() {
		if _, err := tail.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	})
	local, remote := d[0], d[1]
	benchstat.Report(b, "socket", local)
	benchstat.Report(b, "tailnet", remote)
	b.ReportMetric(benchstat.Ratio(remote, local, 50), "p50-ratio")
}

// BenchmarkWhoIs measures one uncached identity lookup (the tsnet
// LocalClient's WhoIs for a peer's address), which the server pays at most
// once per WhoIsCacheTTL per connection; cached calls pay a map lookup.
func BenchmarkWhoIs(b *testing.B) {
	in := testserver.Start(b, testserver.Options{Tailnet: true})
	in.TailnetClient(b, "bench", "tag:agent") // joined and reachable
	lc, err := in.Node.LocalClient()
	if err != nil {
		b.Fatal(err)
	}
	peer := ""
	status, err := lc.Status(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range status.Peer {
		if p.HostName == "bench" {
			peer = p.TailscaleIPs[0].String() + ":1"
		}
	}
	if peer == "" {
		b.Fatal("bench node not among the server's peers")
	}
	b.ResetTimer()
	for range b.N {
		if _, err := lc.WhoIs(context.Background(), peer); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecSandboxed measures a sandboxed Exec of /bin/true end to end
// (the whole pipeline, then bubblewrap with the default profile: writable
// roots by descriptor, kernel masks, limits, seccomp, the start gate)
// against bare bwrap running /bin/true in a minimal sandbox (new
// namespaces, /usr, /proc, /dev, /tmp), the default profile through
// sandbox.Bwrap without the server, and a plain fork-exec, interleaved in
// the same run.
// Run: go test -run '^$' -bench ExecSandboxed -benchtime 1000x ./server/
func BenchmarkExecSandboxed(b *testing.B) {
	bwrapPath, err := sandbox.BwrapPath()
	if err != nil {
		b.Skip(err)
	}
	in := testserver.Start(b, testserver.Options{Policy: `version: 1
limits: {concurrency: 4}
roles: {operator: {permissions: [exec], commands: ["*"]}}
commands: [{name: "true", binary: /bin/true, sandbox: bwrap}]
`})
	ctx := context.Background()
	req := &coilyv1.ExecRequest{Argv: []string{"/bin/true"}}
	if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
		b.Fatal(err)
	}
	home := b.TempDir()
	bare := []string{"--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"}
	for _, l := range []string{"/bin", "/lib", "/lib64", "/sbin"} {
		if t, err := os.Readlink(l); err == nil {
			bare = append(bare, "--symlink", t, l)
		}
	}
	bare = append(bare, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true")
	// The same profile the server builds for the rule (deny set, state
	// directory, limits), through the same backend, without the server.
	rule := in.Server.Policy().Rules()[0]
	limits := rule.Limits
	if limits.CPU == 0 {
		limits.CPU = rule.Timeout
	}
	userHomes := []string{"/root"}
	if h, err := os.UserHomeDir(); err == nil && h != "/root" {
		userHomes = append(userHomes, h)
	}
	box := sandbox.Bwrap{} // with the commands' cgroups when the server has them, as it does
	if g, err := sandbox.FindCgroups("bench"); err == nil {
		box.Cgroups = g
	}
	profile := func() {
		cmd := exec.Command("/bin/true")
		conf, err := box.Wrap(ctx, cmd, sandbox.DefaultProfile(sandbox.ProfileInput{
			Workspace: home, Home: home, Dir: home, Network: sandbox.NetworkDeny,
			Env:      sandbox.Environ(home, nil),
			StateDir: in.StateDir, Socket: in.Socket, UserHomes: userHomes, Limits: limits}))
		if err != nil {
			b.Fatal(err)
		}
		err = cmd.Start()
		conf.AfterStart()
		if err == nil {
			if err = conf.Start(ctx, cmd.Process); err == nil {
				err = cmd.Wait()
			}
		}
		conf.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	d := benchstat.Interleave(b, func() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}, func() {
		if out, err := exec.Command(bwrapPath, bare...).CombinedOutput(); err != nil {
			b.Fatalf("bare bwrap: %v %s", err, out)
		}
	}, profile, func() {
		if _, err := in.Client.Exec(ctx, req, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	})
	fork, bwrap, prof, coily := d[0], d[1], d[2], d[3]
	benchstat.Report(b, "forkexec", fork)
	benchstat.Report(b, "bwrap", bwrap)
	benchstat.Report(b, "profile", prof)
	benchstat.Report(b, "coily", coily)
	b.ReportMetric(benchstat.Ratio(coily, bwrap, 50), "coily/bwrap-p50")
	b.ReportMetric(benchstat.Ratio(prof, bwrap, 50), "profile/bwrap-p50")
	b.ReportMetric(benchstat.Ratio(coily, prof, 50), "coily/profile-p50")
}
